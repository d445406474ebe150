package store

import (
	"errors"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// The events bucket is where registries up to this version kept each
// sandbox's lifecycle log. The control plane now keeps every event in its
// event log (internal/eventlog) and moves a registry's old events there
// when it opens it: EventLogs lists the sandboxes that still have some
// here, Events reads them, DeleteEvents drops them once moved.

// EventLogs returns the ids of the sandboxes with a log in the events
// bucket.
func (d *DB) EventLogs() ([]string, error) {
	var ids []string
	err := d.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketEvents).ForEach(func(k, v []byte) error {
			if v == nil {
				ids = append(ids, string(k))
			}
			return nil
		})
	})
	return ids, err
}

// DeleteEvents drops sandbox id's log from the events bucket (nothing when
// it has none).
func (d *DB) DeleteEvents(id string) error {
	return d.db.Update(func(tx *bolt.Tx) error {
		err := tx.Bucket(bucketEvents).DeleteBucket([]byte(id))
		if errors.Is(err, bolterrors.ErrBucketNotFound) {
			return nil
		}
		return err
	})
}
