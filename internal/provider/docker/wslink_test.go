package docker

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/sandbox"
)

// TestWorkspaceLinkedAfterCreateRefused: a host workspace that became a
// symbolic link after Create (another sandbox whose workspace holds it
// replaced it) is not mounted at the next Start: the engine resolves a
// bind mount's source at every start, and would give the sandbox the
// directory the link points to.
func TestWorkspaceLinkedAfterCreateRefused(t *testing.T) {
	p := newProvider(t)
	ctx := t.Context()
	ws := filepath.Join(t.TempDir(), "ws")
	victim := t.TempDir()
	if err := os.Mkdir(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(victim, "host-secret"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := newBox(t, p, func(s *sandbox.Spec) { s.Workspace = ws })
	if err := p.Stop(ctx, b.spec.ID); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(ws, ws+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, ws); err != nil {
		t.Fatal(err)
	}
	err := startReady(ctx, p, b.spec.ID)
	if err == nil {
		r := b.run(t, "ls /workspace", 30)
		t.Fatalf("Start with the workspace a link to %s succeeded; /workspace holds %q", victim, r.Output)
	}
	if !errors.Is(err, sandbox.ErrUnsafe) || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("Start: %v, want ErrUnsafe naming the link", err)
	}
}
