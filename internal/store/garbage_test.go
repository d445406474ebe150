package store

import (
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// garbageFile writes a bbolt file laid out by build, as a damaged or
// hand-edited registry would be.
func garbageFile(t *testing.T, build func(tx *bolt.Tx) error) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "limbs.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(build); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestGarbageRegistryRefused opens registries whose meta bucket (or the
// buckets a migration reads) hold garbage: each is refused with an error
// that says what to do, and none panics.
func TestGarbageRegistryRefused(t *testing.T) {
	put := func(bucket, key, val string) func(tx *bolt.Tx) error {
		return func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte(bucket))
			if err != nil {
				return err
			}
			return b.Put([]byte(key), []byte(val))
		}
	}
	all := func(fs ...func(tx *bolt.Tx) error) func(tx *bolt.Tx) error {
		return func(tx *bolt.Tx) error {
			for _, f := range fs {
				if err := f(tx); err != nil {
					return err
				}
			}
			return nil
		}
	}
	bucket := func(names ...string) func(tx *bolt.Tx) error {
		return func(tx *bolt.Tx) error {
			var b *bolt.Bucket
			var err error
			for i, n := range names {
				if i == 0 {
					b, err = tx.CreateBucketIfNotExists([]byte(n))
				} else {
					b, err = b.CreateBucketIfNotExists([]byte(n))
				}
				if err != nil {
					return err
				}
			}
			return nil
		}
	}
	cases := map[string]func(tx *bolt.Tx) error{
		"schema 1 without events":   put("meta", "schema", "1"),
		"schema 1 only sandboxes":   all(put("meta", "schema", "1"), bucket("sandboxes")),
		"schema 2 only meta":        put("meta", "schema", "2"),
		"schema binary":             put("meta", "schema", "\x00\xff"),
		"schema huge":               put("meta", "schema", "99999999999999999999999"),
		"schema negative":           put("meta", "schema", "-1"),
		"meta is a value":           put("x", "y", "z"),
		"instance is a bucket":      all(put("meta", "schema", "2"), bucket("sandboxes"), bucket("events"), bucket("meta", "instance")),
		"schema is a bucket":        all(bucket("meta", "schema"), bucket("sandboxes"), bucket("events")),
		"v1 event short key":        all(put("meta", "schema", "1"), bucket("sandboxes"), bucket("events", "sb_1"), put("events", "x", "y")),
		"v1 sandboxes empty events": all(bucket("sandboxes"), bucket("events", "sb_1", "nested")),
	}
	for name, build := range cases {
		t.Run(name, func(t *testing.T) {
			path := garbageFile(t, build)
			var d *DB
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("Open panicked: %v", r)
					}
				}()
				d, err = Open(path)
			}()
			if err == nil {
				d.Close()
				// An "instance is a bucket" registry may only open when it
				// then works.
				t.Fatalf("Open accepted a damaged registry")
			}
			if !strings.Contains(err.Error(), "--state-dir") && !strings.Contains(err.Error(), "report") {
				t.Errorf("error does not say what to do: %v", err)
			}
		})
	}
}

// TestEventsShortKeyNoPanic reads an event log holding a key that is not
// a sequence number.
func TestEventsShortKeyNoPanic(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "limbs.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.AppendEvent("sb_1", Event{Kind: "created"}); err != nil {
		t.Fatal(err)
	}
	if err := d.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketEvents).Bucket([]byte("sb_1")).Put([]byte{0xff}, []byte(`{}`))
	}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("Events panicked: %v", r)
		}
	}()
	if _, err := d.Events("sb_1", 0); err == nil {
		t.Errorf("Events read a key that is no sequence number without an error")
	}
}
