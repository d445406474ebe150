package docker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/testbin"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	limbsclient "github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/wire"
)

// The tests below run real sandboxes on the real engine. They skip when no
// engine answers or limbs/base is missing, and remove everything they
// create, by id, even when they fail.

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

// buildLimbsd is the static limbsd of this work tree, or $LIMBS_TEST_LIMBSD
// when set (a limbsd built elsewhere, for instance from a clean checkout).
func buildLimbsd(t testing.TB) string { return testbin.Path(t, "limbsd", false) }

// newProvider returns a provider on the local engine, or skips.
func newProvider(t testing.TB) *Provider {
	t.Helper()
	if testing.Short() {
		t.Skip("docker tests skipped: -short")
	}
	ctx := t.Context()
	// A short path: a Unix socket path must fit in 108 bytes.
	root, err := os.MkdirTemp("", "limbs-t-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	p, err := New(ctx, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), SocketRoot: root})
	if err != nil {
		testbin.NoDocker(t, "no Docker engine answers (run scripts/docker-up.sh)")
	}
	t.Cleanup(func() { p.Close() })
	if _, err := p.cli.ImageInspect(ctx, DefaultImage); err != nil {
		testbin.NoDocker(t, "image "+DefaultImage+" missing (run scripts/build-base-image.sh)")
	}
	p.opts.LimbsdPath = buildLimbsd(t)
	return p
}

// box is one test sandbox.
type box struct {
	spec sandbox.Spec
	inst sandbox.Instance
	lc   *limbsclient.Client
	dir  string // host side of /run/limbs
}

func randomID(t testing.TB) string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newSpec returns a spec with a fresh id, socket dir and token; cleanup of
// whatever gets created under that id is registered at once.
func newSpec(t testing.TB, p *Provider, edit func(*sandbox.Spec)) sandbox.Spec {
	t.Helper()
	id := "sb_t" + randomID(t)
	spec := sandbox.Spec{
		ID:       id,
		Name:     t.Name(),
		Instance: "cp_test",
		Token:    randomID(t),
	}
	if edit != nil {
		edit(&spec)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if err := p.Remove(ctx, id); err != nil && !errors.Is(err, wire.ErrNotFound) {
			t.Errorf("cleanup: %v", err)
		}
		// Belt and braces, by name: the container and volume of this id only.
		p.cli.ContainerRemove(ctx, containerName(id), client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		p.cli.VolumeRemove(ctx, volumeName(id), client.VolumeRemoveOptions{Force: true})
	})
	return spec
}

func newBox(t *testing.T, p *Provider, edit func(*sandbox.Spec)) *box {
	t.Helper()
	spec := newSpec(t, p, edit)
	inst, err := createReady(t.Context(), p, spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return &box{spec: spec, inst: inst, lc: limbsdClient(t, p, spec), dir: p.opts.socketDir(spec.ID)}
}

// createReady creates a sandbox and waits for its limbsd, as the control
// plane does (removing it when it does not answer).
func createReady(ctx context.Context, p *Provider, spec sandbox.Spec) (sandbox.Instance, error) {
	inst, err := p.Create(ctx, spec)
	if err != nil {
		return inst, err
	}
	if err := ready(ctx, p, spec.ID); err != nil {
		_ = p.Remove(context.WithoutCancel(ctx), spec.ID)
		return sandbox.Instance{}, err
	}
	return inst, nil
}

// startReady starts a sandbox and waits for its limbsd, as the control
// plane does.
func startReady(ctx context.Context, p *Provider, id string) error {
	if err := p.Start(ctx, id); err != nil {
		return err
	}
	return ready(ctx, p, id)
}

// ready waits until sandbox id's limbsd answers health through Dial, or
// Dial says it never will.
func ready(ctx context.Context, p *Provider, id string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	lc := limbsclient.NewDialed(func(ctx context.Context) (net.Conn, error) { return p.Dial(ctx, id) }, "")
	defer lc.HTTPClient().CloseIdleConnections()
	var err error
	for range 1000 {
		if _, err = lc.Health(ctx); err == nil {
			return nil
		}
		if errors.Is(err, sandbox.ErrNotRunning) || errors.Is(err, sandbox.ErrImpostor) || errors.Is(err, wire.ErrNotFound) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
	return err
}

// limbsdClient talks to a sandbox's limbsd straight through its socket.
func limbsdClient(t testing.TB, p *Provider, spec sandbox.Spec) *limbsclient.Client {
	t.Helper()
	lc, err := limbsclient.New("unix://"+filepath.Join(p.opts.socketDir(spec.ID), "limbsd.sock"), spec.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lc.HTTPClient().CloseIdleConnections)
	return lc
}

// agentUser is the default sandbox's agent (Spec.User), for dockerExec;
// the container's own user is limbsd's, root.
const agentUser = DefaultUser

// dockerExec runs argv in the sandbox's container as user (empty: the
// container's user, root) and returns its combined output and exit code. It is
// for setting up hostile situations; checks of what an agent sees go
// through limbsd.
func dockerExec(t *testing.T, p *Provider, b *box, user string, argv ...string) (string, int) {
	t.Helper()
	ctx := t.Context()
	ex, err := p.cli.ExecCreate(ctx, b.inst.ProviderID, client.ExecCreateOptions{User: user, Cmd: argv, AttachStdout: true, AttachStderr: true})
	if err != nil {
		t.Fatalf("docker exec %q: %v", argv, err)
	}
	att, err := p.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		t.Fatalf("docker exec %q: %v", argv, err)
	}
	defer att.Close()
	var out bytes.Buffer
	stdcopy.StdCopy(&out, &out, att.Reader)
	ins, err := p.cli.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
	if err != nil {
		t.Fatalf("docker exec %q: %v", argv, err)
	}
	return out.String(), ins.ExitCode
}

// run runs one command in a fresh limbsd session and returns its result.
func (b *box) run(t *testing.T, command string, timeout float64) wire.Result {
	t.Helper()
	ctx := t.Context()
	s, err := b.lc.CreateSession(ctx, wire.CreateSession{})
	if err != nil {
		t.Fatalf("creating a session: %v", err)
	}
	zero := 0.0
	res, err := b.lc.Exec(ctx, s.ID, wire.Exec{Command: command, Timeout: timeout, YieldAfter: &zero})
	if err != nil {
		t.Fatalf("exec %q: %v", command, err)
	}
	return res
}

func exitCode(r wire.Result) int {
	if r.ExitCode == nil {
		return -1
	}
	return *r.ExitCode
}

// waitEvent reads events until one for id matches kind, failing the test
// if the stream ends first.
func waitEvent(t *testing.T, evs <-chan sandbox.Event, id string, kind sandbox.EventKind) sandbox.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for {
		select {
		case ev, ok := <-evs:
			if !ok {
				t.Fatalf("event stream closed before a %q event for %s", kind, id)
			}
			if ev.ID == id && ev.Kind == kind {
				return ev
			}
		case <-ctx.Done():
			t.Fatalf("no %q event for %s", kind, id)
		}
	}
}
