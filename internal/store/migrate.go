package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Schema versions, as containerd's metadata store keeps them: the version
// is meta/"schema" (a decimal string, as schema 1 wrote it, so that a limbs
// of schema 1 refuses a newer registry by itself), and every change of the
// layout is a migration below, in order. Open runs those a registry lacks,
// each in its own transaction with the version it produces, so that a
// migration that fails leaves the registry at the version before it; a
// registry newer than this code is refused, never written.

// ErrNewerSchema is returned by Open for a registry written by a newer
// limbs.
var ErrNewerSchema = errors.New("registry written by a newer limbs")

// migration brings a registry from schema version-1 to version.
type migration struct {
	version int
	what    string
	migrate func(tx *bolt.Tx) error
}

// migrations are in order; the last one's version is the schema this code
// reads and writes. Schema 1 (the first) has none.
var migrations = []migration{
	{2, "event records without their sequence number, which is their key", migrateEventSeqIsKey},
}

func latestSchema() int { return migrations[len(migrations)-1].version }

// schemaOf is the schema version of the registry tx reads: 0 for an empty
// file, 1 for the buckets of schema 1 without a version key.
func schemaOf(tx *bolt.Tx) (int, error) {
	if meta := tx.Bucket(bucketMeta); meta != nil {
		if v := meta.Get(keySchema); v != nil {
			n, err := strconv.Atoi(string(v))
			if err != nil || n < 1 {
				return 0, fmt.Errorf("its schema version %q is not a number: it is not a limbs registry, or it is damaged; move it aside, or start limbs serve with another --state-dir", v)
			}
			return n, nil
		}
	}
	if tx.Bucket(bucketSandboxes) != nil && tx.Bucket(bucketEvents) != nil {
		return 1, nil
	}
	empty := true
	_ = tx.ForEach(func([]byte, *bolt.Bucket) error { empty = false; return nil })
	if empty {
		return 0, nil
	}
	return 0, errors.New("it has neither a schema version nor the buckets of a limbs registry: it is some other bbolt file; move it aside, or start limbs serve with another --state-dir")
}

// migrate brings the registry at path to the latest schema.
func (d *DB) migrate(path string) error {
	var have int
	if err := d.db.View(func(tx *bolt.Tx) (err error) {
		have, err = schemaOf(tx)
		return err
	}); err != nil {
		return fmt.Errorf("registry %s: %w", path, err)
	}
	latest := latestSchema()
	if have >= 1 && have <= latest {
		// A migration reads the buckets of the schema it starts from: a
		// file that lacks one is damaged, not old.
		if err := d.db.View(func(tx *bolt.Tx) error { return hasBuckets(tx, path) }); err != nil {
			return err
		}
	}
	switch {
	case have > latest:
		return fmt.Errorf("registry %s has schema version %d, and this limbs reads up to %d: %w; run the limbs that wrote it, or start this one with another --state-dir (the registry was left as it is)", path, have, latest, ErrNewerSchema)
	case have == 0:
		return d.db.Update(func(tx *bolt.Tx) error { return create(tx, latest) })
	}
	for _, m := range migrations {
		if m.version <= have {
			continue
		}
		err := d.db.Update(func(tx *bolt.Tx) error {
			if err := m.migrate(tx); err != nil {
				return err
			}
			meta, err := tx.CreateBucketIfNotExists(bucketMeta)
			if err != nil {
				return err
			}
			return meta.Put(keySchema, []byte(strconv.Itoa(m.version)))
		})
		if err != nil {
			return fmt.Errorf("registry %s: migrating schema %d to %d (%s): %w; nothing of this step was written, the registry is still at schema %d: start the limbs that wrote it, or keep the file and report this", path, m.version-1, m.version, m.what, err, have)
		}
		have = m.version
	}
	return nil
}

// hasBuckets checks that the buckets every schema has are there.
func hasBuckets(tx *bolt.Tx, path string) error {
	for _, b := range [][]byte{bucketMeta, bucketSandboxes, bucketEvents} {
		if tx.Bucket(b) == nil {
			return fmt.Errorf("registry %s has no %q bucket: it is damaged; move it aside, or start limbs serve with another --state-dir", path, b)
		}
	}
	return nil
}

// create lays out an empty registry at schema version.
func create(tx *bolt.Tx, version int) error {
	for _, b := range [][]byte{bucketMeta, bucketSandboxes, bucketEvents} {
		if _, err := tx.CreateBucket(b); err != nil {
			return err
		}
	}
	return tx.Bucket(bucketMeta).Put(keySchema, []byte(strconv.Itoa(version)))
}

// eventV1 is an event as schema 1 stored it, eventV2 as schema 2 does. A
// migration keeps types of its own: the store's may change again.
type (
	eventV1 struct {
		Seq     uint64    `json:"seq"`
		Time    time.Time `json:"time"`
		Kind    string    `json:"kind"`
		Reason  string    `json:"reason,omitempty"`
		Message string    `json:"message,omitempty"`
	}
	eventV2 struct {
		Time    time.Time `json:"time"`
		Kind    string    `json:"kind"`
		Reason  string    `json:"reason,omitempty"`
		Message string    `json:"message,omitempty"`
	}
)

// migrateEventSeqIsKey (schema 2) rewrites every event without the
// sequence number schema 1 kept in it besides its key: the key is the one
// Events seeks on, so it is the one kept. An event whose two numbers
// differ was not written by limbs and stops the migration. Schema 1 also
// wrote its version only on Open; schema 2 records it here for a registry
// that has none (as every migration does).
func migrateEventSeqIsKey(tx *bolt.Tx) error {
	evs := tx.Bucket(bucketEvents)
	var ids [][]byte
	if err := evs.ForEach(func(k, v []byte) error {
		if v != nil {
			return fmt.Errorf("events: %q holds a value, not a sandbox's log", k)
		}
		ids = append(ids, append([]byte(nil), k...))
		return nil
	}); err != nil {
		return err
	}
	for _, id := range ids {
		b := evs.Bucket(id)
		var keys, vals [][]byte
		err := b.ForEach(func(k, v []byte) error {
			if len(k) != 8 || v == nil {
				return fmt.Errorf("events of %s: key %x is not a sequence number", id, k)
			}
			seq := binary.BigEndian.Uint64(k)
			var e eventV1
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("event %d of %s: %w", seq, id, err)
			}
			if e.Seq != seq {
				return fmt.Errorf("event %d of %s says it is event %d: it was not written by limbs", seq, id, e.Seq)
			}
			nv, err := json.Marshal(eventV2{Time: e.Time, Kind: e.Kind, Reason: e.Reason, Message: e.Message})
			if err != nil {
				return err
			}
			keys, vals = append(keys, append([]byte(nil), k...)), append(vals, nv)
			return nil
		})
		if err != nil {
			return err
		}
		for i := range keys {
			if err := b.Put(keys[i], vals[i]); err != nil {
				return err
			}
		}
	}
	return nil
}
