package store

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/limbs-dev/limbs/internal/wire"
)

// testdata/limbs-v1.db was written by the store of schema 1 (commit
// 6b6dedb) with testdata/gen_v1_test.go.txt; v1Records and v1Events are
// what that program put in it.
const v1Instance = "i_bc23ff383a81a16c"

var v1T0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func v1At(m int) time.Time { return v1T0.Add(time.Duration(m) * time.Minute) }

var v1Records = []Record{
	{ID: "sb_0a1b2c3d4e5f6071", Name: "web", Provider: "docker", ProviderID: "c0ffee1234", Image: "limbs/base:latest",
		Limits: wire.Limits{Cpus: 2, MemoryMB: 2048, Pids: 512, Network: wire.NetworkNone, TmpMB: 512, User: "1000:1000", MaxDiskMB: 100},
		Env:    map[string]string{"A": "1", "B": "two"}, Status: wire.SandboxRunning, Desired: "running", Token: "tok-web",
		SocketDir: "/state/sandboxes/sb_0a1b2c3d4e5f6071/run", CreatedAt: v1T0, UpdatedAt: v1T0.Add(3 * time.Minute)},
	{ID: "sb_1111111111111111", Name: "batch", Provider: "local", ProviderID: "4242",
		Limits: wire.Limits{Network: wire.NetworkBridge, ReadOnlyRoot: true}, Workspace: "/home/u/proj",
		Status: wire.SandboxFailed, Reason: "oom_killed", Message: "recovering after oom_killed at 2026-11-30T12:05:00Z; retry in a few seconds",
		Desired: "running", Token: "tok-batch", SocketDir: "/state/sandboxes/sb_1111111111111111/run",
		CreatedAt: v1T0.Add(time.Minute), UpdatedAt: v1T0.Add(5 * time.Minute)},
	{ID: "sb_2222222222222222", Name: "pool-1", Provider: "docker", Image: "limbs/base:latest",
		Limits: wire.Limits{Network: wire.NetworkNone}, Status: wire.SandboxStopped, Desired: "stopped", Token: "tok-pool",
		SocketDir: "/state/sandboxes/sb_2222222222222222/run", CreatedAt: v1T0.Add(2 * time.Minute), UpdatedAt: v1T0.Add(2 * time.Minute),
		Pool: "limbs/base:latest"},
}

var v1Events = map[string][]Event{
	"sb_0a1b2c3d4e5f6071": {
		{Seq: 1, Time: v1At(0), Kind: "created", Message: "warm pool: none"},
		{Seq: 2, Time: v1At(1), Kind: "stopped"},
		{Seq: 3, Time: v1At(2), Kind: "started"},
		{Seq: 4, Time: v1At(3).Add(123456789), Kind: "died", Reason: "daemon_exited"},
		{Seq: 5, Time: v1At(3).Add(987654321), Kind: "recovered", Reason: "daemon_exited", Message: "restarted limbsd; sessions were restored"},
	},
	"sb_1111111111111111": {
		{Seq: 1, Time: v1At(1), Kind: "created"},
		{Seq: 2, Time: v1At(4), Kind: "oom", Reason: "oom_killed", Message: "a process in the sandbox was killed: out of memory"},
		{Seq: 3, Time: v1At(5), Kind: "died", Reason: "oom_killed"},
	},
	"sb_2222222222222222": {},
	"sb_3333333333333333": {}, // removed: record and log are gone
}

// v1Copy is a copy of the schema-1 registry to open (the committed file is
// never written).
func v1Copy(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "limbs-v1.db"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "limbs.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// raw is what a registry file holds, read with bbolt itself.
type raw struct {
	schema string
	txid   int
	events map[string]map[uint64]string // sandbox id -> seq -> stored value
}

func readRaw(t *testing.T, path string) raw {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r := raw{events: map[string]map[uint64]string{}}
	err = db.View(func(tx *bolt.Tx) error {
		r.txid = tx.ID()
		if m := tx.Bucket(bucketMeta); m != nil {
			r.schema = string(m.Get(keySchema))
		}
		evs := tx.Bucket(bucketEvents)
		if evs == nil {
			return nil
		}
		return evs.ForEach(func(id, _ []byte) error {
			m := map[uint64]string{}
			r.events[string(id)] = m
			return evs.Bucket(id).ForEach(func(k, v []byte) error {
				m[binary.BigEndian.Uint64(k)] = string(v)
				return nil
			})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// edit changes a registry file with bbolt itself.
func edit(t *testing.T, path string, f func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(f); err != nil {
		t.Fatal(err)
	}
}

// checkV1Content checks that db holds everything the schema-1 file holds.
func checkV1Content(t *testing.T, db *DB) {
	t.Helper()
	if db.Instance() != v1Instance {
		t.Errorf("instance = %q, want %q (kept from schema 1)", db.Instance(), v1Instance)
	}
	got, err := db.List()
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(v1Records, got); d != "" {
		t.Errorf("records after migration (-want +got):\n%s", d)
	}
	for _, r := range v1Records {
		g, err := db.Get(r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(r, g); d != "" {
			t.Errorf("Get(%s) (-want +got):\n%s", r.ID, d)
		}
	}
	for id, want := range v1Events {
		evs, err := db.Events(id, 0)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want, evs); d != "" {
			t.Errorf("events of %s (-want +got):\n%s", id, d)
		}
		if len(want) > 1 {
			evs, _ = db.Events(id, 2)
			if d := cmp.Diff(want[1:], evs); d != "" {
				t.Errorf("events of %s from 2 (-want +got):\n%s", id, d)
			}
		}
	}
}

func TestSchema1FileMigrates(t *testing.T) {
	path := v1Copy(t)
	before := readRaw(t, path)
	if before.schema != "1" || !strings.Contains(before.events["sb_0a1b2c3d4e5f6071"][1], `"seq":1`) {
		t.Fatalf("testdata is not a schema-1 registry: schema %q, first event %s", before.schema, before.events["sb_0a1b2c3d4e5f6071"][1])
	}
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	checkV1Content(t, db)
	// The log goes on after the migrated events.
	e, err := db.AppendEvent("sb_1111111111111111", Event{Time: v1At(9), Kind: "recovered", Reason: "oom_killed"})
	if err != nil || e.Seq != 4 {
		t.Errorf("AppendEvent after migration = seq %d, %v; want seq 4", e.Seq, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	after := readRaw(t, path)
	if after.schema != "2" {
		t.Errorf("schema after migration = %q, want \"2\"", after.schema)
	}
	n := 0
	for id, evs := range after.events {
		for seq, v := range evs {
			n++
			if strings.Contains(v, `"seq"`) {
				t.Errorf("event %d of %s still holds its sequence number: %s", seq, id, v)
			}
		}
	}
	if n != 9 {
		t.Errorf("%d events stored after migration, want 9", n)
	}
	// Reopened at the latest schema: the same content, nothing migrated again.
	db, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	evs, _ := db.Events("sb_1111111111111111", 4)
	if len(evs) != 1 || evs[0].Kind != "recovered" {
		t.Errorf("event appended after migration reads back as %+v", evs)
	}
}

// A schema-1 registry without its version key (schema 1 wrote it on every
// Open, so only a hand-edited file lacks it) is recognised by its buckets.
func TestSchema1WithoutVersionKey(t *testing.T) {
	path := v1Copy(t)
	edit(t, path, func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Delete(keySchema) })
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	checkV1Content(t, db)
	db.Close()
	if s := readRaw(t, path).schema; s != "2" {
		t.Errorf("schema after migration = %q, want \"2\" recorded", s)
	}
}

func TestCurrentSchemaIsNotWritten(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limbs.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.AppendEvent("sb_x", Event{Kind: "created"}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	before := readRaw(t, path)
	if before.schema != "2" {
		t.Errorf("a new registry has schema %q, want \"2\" (the latest)", before.schema)
	}
	if v := before.events["sb_x"][1]; strings.Contains(v, `"seq"`) || !strings.Contains(v, `"kind":"created"`) {
		t.Errorf("a new registry stores an event as %s, want schema 2's shape", v)
	}
	db, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if after := readRaw(t, path); after.txid != before.txid {
		t.Errorf("opening a registry at the latest schema wrote to it (transaction %d, then %d)", before.txid, after.txid)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	path := v1Copy(t)
	edit(t, path, func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchema, []byte("3")) })
	before := readRaw(t, path)
	_, err := Open(path)
	if !errors.Is(err, ErrNewerSchema) {
		t.Fatalf("Open of a schema-3 registry: error %v, want ErrNewerSchema", err)
	}
	for _, s := range []string{"schema version 3", "reads up to 2", "--state-dir"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if after := readRaw(t, path); after.txid != before.txid || after.schema != "3" {
		t.Errorf("the refused registry was written: transaction %d then %d, schema %q", before.txid, after.txid, after.schema)
	}
}

func TestNotARegistryRefused(t *testing.T) {
	for name, f := range map[string]func(tx *bolt.Tx) error{
		"other buckets": func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("images")); return err },
		"bad version": func(tx *bolt.Tx) error {
			b, err := tx.CreateBucket(bucketMeta)
			if err != nil {
				return err
			}
			return b.Put(keySchema, []byte("v1"))
		},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "limbs.db")
			edit(t, path, f)
			_, err := Open(path)
			if err == nil || !strings.Contains(err.Error(), "--state-dir") {
				t.Errorf("Open = %v, want a refusal that says what to do", err)
			}
		})
	}
}

// A migration that fails after it wrote some of its changes leaves the
// registry at the schema before it, and the next Open migrates it whole.
func TestInterruptedMigrationLeavesOldSchema(t *testing.T) {
	path := v1Copy(t)
	orig := migrations
	t.Cleanup(func() { migrations = orig })
	fault := errors.New("injected fault")
	migrations = []migration{{2, "fails half way", func(tx *bolt.Tx) error {
		if err := migrateEventSeqIsKey(tx); err != nil {
			return err
		}
		if _, err := tx.CreateBucket([]byte("half")); err != nil {
			return err
		}
		return fault
	}}}
	_, err := Open(path)
	if !errors.Is(err, fault) || !strings.Contains(err.Error(), "still at schema 1") {
		t.Fatalf("Open with a failing migration = %v, want the fault and the schema it stays at", err)
	}
	r := readRaw(t, path)
	if r.schema != "1" || !strings.Contains(r.events["sb_0a1b2c3d4e5f6071"][3], `"seq":3`) {
		t.Errorf("after a failed migration: schema %q, event 3 %s; want schema 1 untouched", r.schema, r.events["sb_0a1b2c3d4e5f6071"][3])
	}

	migrations = orig
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	checkV1Content(t, db)
	_ = db.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket([]byte("half")) != nil {
			t.Error("the failed migration's bucket is in the registry")
		}
		return nil
	})
}

// Migrations run in order, each once, each in its own transaction: a
// failure in the second keeps what the first did.
func TestMigrationsRunInOrder(t *testing.T) {
	path := v1Copy(t)
	orig := migrations
	t.Cleanup(func() { migrations = orig })
	var ran []int
	step := func(v int, fail bool) migration {
		return migration{v, "step", func(tx *bolt.Tx) error {
			ran = append(ran, v)
			if v == 2 {
				if err := migrateEventSeqIsKey(tx); err != nil {
					return err
				}
			}
			if fail {
				return errors.New("injected fault")
			}
			return nil
		}}
	}
	migrations = []migration{step(2, false), step(3, true)}
	if _, err := Open(path); err == nil || !strings.Contains(err.Error(), "still at schema 2") {
		t.Fatalf("Open = %v, want a failure at schema 2", err)
	}
	if s := readRaw(t, path).schema; s != "2" {
		t.Errorf("schema after the second migration failed = %q, want \"2\"", s)
	}
	migrations = []migration{step(2, false), step(3, false)}
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	checkV1Content(t, db)
	db.Close()
	db, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if d := cmp.Diff([]int{2, 3, 3}, ran); d != "" {
		t.Errorf("migrations run (-want +got):\n%s", d)
	}
}
