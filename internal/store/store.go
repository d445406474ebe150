// Package store is the control plane's registry: the sandboxes `limbs serve`
// created and the lifecycle events of each, kept in one embedded bbolt file
// so that a restarted control plane knows what it owns.
//
// Schema (file StateDir/limbs.db, schema version 2; migrate.go has how
// each version differs from the one before and brings an older file up):
//
//	meta       bucket
//	  "schema"   -> "2" (decimal)
//	  "instance" -> this control plane's instance id (i_ + 16 hex), created once;
//	                providers label everything they create with it
//	sandboxes  bucket
//	  sandbox id (sb_...) -> JSON Record
//	events     bucket (legacy: the control plane moves what it holds to its
//	           event log, internal/eventlog, at start; see legacy.go)
//	  sandbox id -> nested bucket
//	    8-byte big-endian sequence number (from 1) -> JSON Event without
//	                                                  its Seq (the key)
//
// It must never decide anything: it stores and returns what the control plane
// hands it, and it never talks to a provider.
package store

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/limbs-dev/limbs/internal/wire"
)

var (
	bucketMeta      = []byte("meta")
	bucketSandboxes = []byte("sandboxes")
	bucketEvents    = []byte("events")
	keySchema       = []byte("schema")
	keyInstance     = []byte("instance")
)

// ErrLocked is returned by Open when another process holds the database.
var ErrLocked = errors.New("registry is in use by another process")

// Record is everything the control plane remembers about one sandbox.
type Record struct {
	ID         string            `json:"id"`
	Name       string            `json:"name"`
	Provider   string            `json:"provider"`
	ProviderID string            `json:"provider_id,omitempty"`
	Image      string            `json:"image"`
	Limits     wire.Limits       `json:"limits"`
	Env        map[string]string `json:"env,omitempty"`
	// SecretEnv names the entries of Env whose values are masked in
	// every event, log line and answer of the control plane. The values
	// stay here (the registry is mode 0600 and holds each sandbox's
	// limbsd token too) so that a restarted control plane masks them.
	SecretEnv []string `json:"secret_env,omitempty"`
	Workspace string   `json:"workspace,omitempty"`
	// Status is one of the wire.Sandbox* statuses.
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Desired is what the user last asked for: running or stopped. Recovery
	// brings back only sandboxes that should run.
	Desired   string    `json:"desired"`
	Token     string    `json:"token"`
	SocketDir string    `json:"socket_dir"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Pool is the pool key (image) while the sandbox waits, unclaimed, in the
	// warm pool; empty once a client owns it.
	Pool string `json:"pool,omitempty"`
	// Lower is the checkpoint tree (a host directory) a fork's workspace
	// is a copy-on-write view of; empty for a workspace of its own.
	Lower string `json:"lower,omitempty"`
	// LowerMounted: the overlay over Lower is not a volume the sandbox was
	// created with but mounted by the control plane into a running
	// warm-pool sandbox the fork claimed; every start mounts it again.
	LowerMounted bool `json:"lower_mounted,omitempty"`
}

// Event is one entry of a sandbox's lifecycle log. The control plane
// serves it as a wire.SandboxEvent.
type Event struct {
	Seq     uint64
	Time    time.Time
	Kind    string // one of the wire.Event* kinds
	Reason  string
	Message string
}

// eventValue is an Event as the registry stores it (schema 2): its
// sequence number is its key.
type eventValue struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Reason  string    `json:"reason,omitempty"`
	Message string    `json:"message,omitempty"`
}

// DB is an open registry.
type DB struct {
	db       *bolt.DB
	instance string
}

// Open opens (creating if needed) the registry at path.
func Open(path string) (*DB, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("open %s: %w; is another `limbs serve` using this --state-dir?", path, ErrLocked)
		}
		return nil, fmt.Errorf("open registry %s: %w", path, err)
	}
	d := &DB{db: db}
	if err := d.migrate(path); err != nil {
		db.Close()
		return nil, err
	}
	if err := d.loadInstance(path); err != nil {
		db.Close()
		return nil, err
	}
	return d, nil
}

// loadInstance reads the instance id, creating it once, and checks that
// the buckets of the schema are there. A registry that has everything is
// not written to.
func (d *DB) loadInstance(path string) error {
	err := d.db.View(func(tx *bolt.Tx) error {
		if err := hasBuckets(tx, path); err != nil {
			return err
		}
		if tx.Bucket(bucketMeta).Bucket(keyInstance) != nil {
			return fmt.Errorf("registry %s: its instance id is a bucket, not a value: it is damaged; move it aside, or start limbs serve with another --state-dir", path)
		}
		d.instance = string(tx.Bucket(bucketMeta).Get(keyInstance))
		return nil
	})
	if err != nil || d.instance != "" {
		return err
	}
	return d.db.Update(func(tx *bolt.Tx) error {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		d.instance = "i_" + hex.EncodeToString(b)
		return tx.Bucket(bucketMeta).Put(keyInstance, []byte(d.instance))
	})
}

// Close closes the file.
func (d *DB) Close() error { return d.db.Close() }

// Instance is this control plane's id, stable across restarts.
func (d *DB) Instance() string { return d.instance }

// Put stores r, replacing any record with the same id, and appends evs to
// its event log in the same transaction (one disk sync for both).
func (d *DB) Put(r Record, evs ...Event) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return d.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketSandboxes).Put([]byte(r.ID), b); err != nil {
			return err
		}
		for _, e := range evs {
			if _, err := appendEvent(tx, r.ID, e); err != nil {
				return err
			}
		}
		return nil
	})
}

// Get returns the record of id (wire.ErrNotFound when there is none).
func (d *DB) Get(id string) (Record, error) {
	var r Record
	err := d.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketSandboxes).Get([]byte(id))
		if v == nil {
			return fmt.Errorf("sandbox %q: %w", id, wire.ErrNotFound)
		}
		return json.Unmarshal(v, &r)
	})
	return r, err
}

// List returns every record, oldest first.
func (d *DB) List() ([]Record, error) {
	var out []Record
	err := d.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSandboxes).ForEach(func(k, v []byte) error {
			var r Record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("record %s: %w", k, err)
			}
			out = append(out, r)
			return nil
		})
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, err
}

// Delete forgets a sandbox and its event log. Deleting what is not there is
// not an error.
func (d *DB) Delete(id string) error {
	return d.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketSandboxes).Delete([]byte(id)); err != nil {
			return err
		}
		err := tx.Bucket(bucketEvents).DeleteBucket([]byte(id))
		if errors.Is(err, bolterrors.ErrBucketNotFound) {
			return nil
		}
		return err
	})
}

// AppendEvent adds e to the log of sandbox id, assigning its sequence number.
func (d *DB) AppendEvent(id string, e Event) (Event, error) {
	err := d.db.Update(func(tx *bolt.Tx) error {
		var err error
		e, err = appendEvent(tx, id, e)
		return err
	})
	return e, err
}

func appendEvent(tx *bolt.Tx, id string, e Event) (Event, error) {
	b, err := tx.Bucket(bucketEvents).CreateBucketIfNotExists([]byte(id))
	if err != nil {
		return e, err
	}
	seq, err := b.NextSequence()
	if err != nil {
		return e, err
	}
	e.Seq = seq
	v, err := json.Marshal(eventValue{Time: e.Time, Kind: e.Kind, Reason: e.Reason, Message: e.Message})
	if err != nil {
		return e, err
	}
	return e, b.Put(seqKey(seq), v)
}

// Events returns the events of sandbox id with Seq >= from, in order.
func (d *DB) Events(id string, from uint64) ([]Event, error) {
	out := []Event{}
	err := d.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents).Bucket([]byte(id))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.Seek(seqKey(from)); k != nil; k, v = c.Next() {
			var e eventValue
			if len(k) != 8 || v == nil {
				return fmt.Errorf("events of %s: key %x is not a sequence number: the registry is damaged; move it aside, or start limbs serve with another --state-dir", id, k)
			}
			seq := binary.BigEndian.Uint64(k)
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("event %d of %s: %w", seq, id, err)
			}
			out = append(out, Event{Seq: seq, Time: e.Time, Kind: e.Kind, Reason: e.Reason, Message: e.Message})
		}
		return nil
	})
	return out, err
}

func seqKey(seq uint64) []byte {
	k := make([]byte, 8)
	binary.BigEndian.PutUint64(k, seq)
	return k
}
