package local

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/sandbox"
)

// A host workspace that became a symbolic link after Create (another
// sandbox whose workspace holds it replaced it) is not used when the
// daemon starts again: limbsd (and bubblewrap's --bind) would follow it
// to the directory it points to, and write there as the host's user.
func TestStartRefusesWorkspaceTurnedLink(t *testing.T) {
	root := t.TempDir()
	p, err := New(Options{Root: root, Isolation: IsolateNone})
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(t.TempDir(), "ws")
	victim := t.TempDir()
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	// The daemon leaves a mark in its working directory, the workspace.
	fake := filepath.Join(root, "fake-limbsd")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\ntouch started\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p.opts.LimbsdPath = fake
	spec := sandbox.Spec{ID: "sb_ws", Token: "t", Workspace: ws}
	if err := os.MkdirAll(p.dir(spec.ID), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(ws, ws+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, ws); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	pr, err := p.spawn(meta{Spec: spec, Workdir: ws})
	p.mu.Unlock()
	if err == nil {
		select {
		case <-pr.done:
		case <-time.After(10 * time.Second):
		}
		if _, serr := os.Stat(filepath.Join(victim, "started")); serr == nil {
			t.Fatalf("the daemon started in %s, the directory the workspace's link points to", victim)
		}
		t.Fatalf("spawn with the workspace a link: no error, want sandbox.ErrUnsafe")
	}
	if !errors.Is(err, sandbox.ErrUnsafe) {
		t.Errorf("spawn: %v, want sandbox.ErrUnsafe", err)
	}
}
