package local

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/testbin"
)

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

// TestCreateRetriesMountRace: when bubblewrap exits at start because a
// host mount changed under it (a concurrent Docker engine, fb47685),
// Create starts limbsd again and returns once it listens, although the
// provider no longer waits for limbsd's health (the control plane does,
// through Dial); Dial then reaches that limbsd.
func TestCreateRetriesMountRace(t *testing.T) {
	limbsd := testbin.Path(t, "limbsd", false)
	// Short: a Unix socket path has room for ~108 bytes.
	root, err := os.MkdirTemp("", "lmr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	raced := filepath.Join(root, "raced")
	fake := filepath.Join(root, "fake-bwrap")
	script := fmt.Sprintf(`#!/bin/sh
if [ ! -e %[1]s ]; then
	touch %[1]s
	echo "bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: remount \"/newroot/var/lib/docker/overlay2/x-init/merged\": Invalid argument" >&2
	exit 1
fi
exec %[2]s "$@"
`, raced, limbsd)
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Root: root, Isolation: IsolateNone, LimbsdPath: fake})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	spec := sandbox.Spec{ID: "sb_race", Token: "race-token"}
	t.Cleanup(func() { _ = p.Remove(context.Background(), spec.ID) })
	if _, err := p.Create(ctx, spec); err != nil {
		t.Fatalf("Create after a lost mount race: %v", err)
	}
	if _, err := os.Stat(raced); err != nil {
		t.Fatalf("the first start did not run: %v", err)
	}
	lc := client.NewDialed(func(ctx context.Context) (net.Conn, error) { return p.Dial(ctx, spec.ID) }, spec.Token)
	defer lc.HTTPClient().CloseIdleConnections()
	testbin.Eventually(t, "limbsd answers through Dial", 30*time.Second, func() bool {
		_, err := lc.Health(ctx)
		return err == nil
	})
}
