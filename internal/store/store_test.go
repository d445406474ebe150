package store

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/limbs-dev/limbs/internal/wire"
)

func TestRecordsSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limbs.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	inst := db.Instance()
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	recs := []Record{
		{ID: "sb_b", Name: "second", Provider: "local", Status: wire.SandboxRunning, Desired: "running", Token: "t2", CreatedAt: t0.Add(time.Minute), Env: map[string]string{"K": "V"}},
		{ID: "sb_a", Name: "first", Provider: "docker", Status: wire.SandboxStopped, Desired: "stopped", Token: "t1", CreatedAt: t0, Limits: wire.Limits{Cpus: 2, MemoryMB: 512}},
	}
	for _, r := range recs {
		if err := db.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.AppendEvent("sb_a", Event{Kind: "created", Time: t0}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if db.Instance() != inst {
		t.Errorf("instance id changed across reopen: %q then %q", inst, db.Instance())
	}
	got, err := db.List()
	if err != nil {
		t.Fatal(err)
	}
	want := []Record{recs[1], recs[0]} // oldest first
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("List after reopen (-want +got):\n%s", d)
	}
	r, err := db.Get("sb_b")
	if err != nil || r.Name != "second" {
		t.Errorf("Get(sb_b) = %+v, %v", r, err)
	}
	if _, err := db.Get("sb_missing"); !errors.Is(err, wire.ErrNotFound) {
		t.Errorf("Get(missing) error = %v, want ErrNotFound", err)
	}
}

func TestEvents(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "limbs.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	kinds := []string{"created", "died", "recovered"}
	for _, k := range kinds {
		if _, err := db.AppendEvent("sb_x", Event{Kind: k, Reason: "r-" + k}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		from uint64
		want []string
	}{
		{0, kinds},
		{1, kinds},
		{2, kinds[1:]},
		{4, nil},
	}
	for _, tc := range tests {
		t.Run("", func(t *testing.T) {
			evs, err := db.Events("sb_x", tc.from)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for i, e := range evs {
				got = append(got, e.Kind)
				if want := tc.from + uint64(i); tc.from > 0 && e.Seq != want {
					t.Errorf("event %d has seq %d, want %d", i, e.Seq, want)
				}
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("Events(from=%d) kinds (-want +got):\n%s", tc.from, d)
			}
		})
	}
	if err := db.Delete("sb_x"); err != nil {
		t.Fatal(err)
	}
	if evs, _ := db.Events("sb_x", 0); len(evs) != 0 {
		t.Errorf("events survive Delete: %+v", evs)
	}
	if err := db.Delete("sb_x"); err != nil {
		t.Errorf("second Delete: %v", err)
	}
}

func TestSecondOpenFailsClearly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limbs.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := Open(path); !errors.Is(err, ErrLocked) {
		t.Errorf("second Open error = %v, want ErrLocked", err)
	}
}
