package control_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/conformance"
	"github.com/limbs-dev/limbs/internal/control"
	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// tcpProvider runs a real limbsd per sandbox that listens on TCP, on
// 127.0.0.1 only, with its workspace and state in a directory of its own
// that nobody else is told about: no socket directory, nothing the control
// plane could dial but through Dial. It is what a provider whose sandboxes
// are elsewhere (a pod on another node) looks like to the control plane.
type tcpProvider struct {
	t   testing.TB
	bin string

	mu    sync.Mutex
	boxes map[string]*tcpBox
}

type tcpBox struct {
	spec sandbox.Spec
	dir  string
	// Set by start; done is closed when the process has exited.
	addr string
	cmd  *exec.Cmd
	done chan struct{}
	logs *testbin.Buffer
}

func newTCPProvider(t testing.TB) *tcpProvider {
	p := &tcpProvider{t: t, bin: limbsdBinary(t), boxes: map[string]*tcpBox{}}
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, b := range p.boxes {
			b.stop()
		}
	})
	return p
}

func (p *tcpProvider) Name() string { return "tcp" }

func (p *tcpProvider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := &tcpBox{spec: spec, dir: p.t.TempDir()}
	p.boxes[spec.ID] = b
	if err := b.start(p.bin); err != nil {
		return sandbox.Instance{}, err
	}
	return b.instance(), nil
}

// start runs limbsd on a free loopback port; an image "broken" gives it a
// flag it refuses, so that it exits at start.
func (b *tcpBox) start(bin string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	b.addr = ln.Addr().String()
	ln.Close()
	args := []string{"--listen", b.addr, "--token", b.spec.Token,
		"--workdir", filepath.Join(b.dir, "workspace"), "--state-dir", filepath.Join(b.dir, "state")}
	if b.spec.Image == "broken" {
		args = append(args, "--no-such-flag")
	}
	b.cmd = exec.Command(bin, args...)
	b.cmd.Env = os.Environ()
	b.logs = &testbin.Buffer{}
	b.cmd.Stdout, b.cmd.Stderr = b.logs, b.logs
	if err := b.cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	b.done = done
	cmd := b.cmd
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	return nil
}

func (b *tcpBox) running() bool {
	if b.done == nil {
		return false
	}
	select {
	case <-b.done:
		return false
	default:
		return true
	}
}

func (b *tcpBox) stop() {
	if !b.running() {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
}

func (b *tcpBox) instance() sandbox.Instance {
	return sandbox.Instance{
		ID:         b.spec.ID,
		ProviderID: "tcp:" + b.addr,
		Labels:     map[string]string{sandbox.LabelManaged: "true", sandbox.LabelInstance: b.spec.Instance, sandbox.LabelSandbox: b.spec.ID},
		State:      sandbox.State{Running: b.running()},
	}
}

func (p *tcpProvider) get(id string) (*tcpBox, error) {
	b, ok := p.boxes[id]
	if !ok {
		return nil, fmt.Errorf("tcp sandbox %s: %w", id, wire.ErrNotFound)
	}
	return b, nil
}

// Dial connects to the sandbox's limbsd over TCP loopback.
func (p *tcpProvider) Dial(ctx context.Context, id string) (net.Conn, error) {
	p.mu.Lock()
	b, err := p.get(id)
	var addr string
	if err == nil {
		if !b.running() {
			err = fmt.Errorf("limbsd of tcp sandbox %s exited: %s: %w", id, strings.TrimSpace(b.logs.String()), sandbox.ErrNotRunning)
		}
		addr = b.addr
	}
	p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

func (p *tcpProvider) Start(ctx context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := p.get(id)
	if err != nil || b.running() {
		return err
	}
	return b.start(p.bin)
}

func (p *tcpProvider) Stop(ctx context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := p.get(id)
	if err == nil {
		b.stop()
	}
	return err
}

func (p *tcpProvider) Remove(ctx context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := p.get(id)
	if err == nil {
		b.stop()
		delete(p.boxes, id)
	}
	return err
}

func (p *tcpProvider) Inspect(ctx context.Context, id string) (sandbox.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := p.get(id)
	if err != nil {
		return sandbox.Instance{}, err
	}
	return b.instance(), nil
}

func (p *tcpProvider) List(ctx context.Context, instance string) ([]sandbox.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []sandbox.Instance
	for _, b := range p.boxes {
		if b.spec.Instance == instance {
			out = append(out, b.instance())
		}
	}
	return out, nil
}

func (p *tcpProvider) Events(ctx context.Context) (<-chan sandbox.Event, error) {
	return make(chan sandbox.Event), nil
}

// Issue 11, acceptance 1: the control plane knows no host path of a
// sandbox. Through limbs serve's HTTP handler, a sandbox whose limbsd
// listens on TCP loopback, with no socket directory, passes the session
// conformance suite, stops and starts again (the control plane waits for
// its health through Dial), and a limbsd that exits at start fails the
// create at once with its log, not after a timeout.
func TestTCPProviderConformance(t *testing.T) {
	prov := newTCPProvider(t)
	dir := t.TempDir()
	srv, err := control.New(context.Background(), control.Options{
		StateDir:  dir,
		Token:     e2eToken,
		Providers: map[string]control.Provider{"tcp": prov},
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() { ts.Close(); srv.Close() })
	c, err := client.New(ts.URL, e2eToken, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var sb wire.Sandbox
	if err := c.JSON(ctx, http.MethodPost, "/sandboxes", wire.CreateSandbox{Name: "tcp"}, &sb); err != nil {
		t.Fatalf("create: %v", err)
	}
	if sb.Status != wire.SandboxRunning {
		t.Fatalf("created %+v", sb)
	}
	sc, err := client.New(ts.URL, e2eToken, "/sandboxes/"+sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("suite", func(t *testing.T) { conformance.Run(t, sc) })

	for _, verb := range []string{"stop", "start"} {
		if err := c.JSON(ctx, http.MethodPost, "/sandboxes/"+sb.ID+"/"+verb, nil, &sb); err != nil {
			t.Fatalf("%s: %v", verb, err)
		}
	}
	if _, err := sc.Health(ctx); err != nil {
		t.Fatalf("health right after start: %v", err)
	}
	s, err := sc.CreateSession(ctx, wire.CreateSession{})
	if err != nil {
		t.Fatalf("session after a restart: %v", err)
	}
	r, err := sc.Exec(ctx, s.ID, wire.Exec{Command: "echo again"})
	if err != nil || r.ExitCode == nil || *r.ExitCode != 0 || !strings.Contains(r.Output, "again") {
		t.Fatalf("exec after a restart: %+v, %v", r, err)
	}

	err = c.JSON(ctx, http.MethodPost, "/sandboxes", wire.CreateSandbox{Name: "broken", Image: "broken"}, nil)
	if !errors.Is(err, wire.ErrUnavailable) && !errors.Is(err, wire.ErrBadRequest) {
		t.Errorf("create of a limbsd that exits: %v, want an error", err)
	} else if !strings.Contains(err.Error(), "no-such-flag") {
		t.Errorf("create of a limbsd that exits: %v, want its log (no-such-flag)", err)
	}

	if err := c.JSON(ctx, http.MethodDelete, "/sandboxes/"+sb.ID, nil, nil); err != nil {
		t.Fatalf("remove: %v", err)
	}
	// The control plane made no directory for its sandboxes: its registry,
	// its own event log and its checkpoint store are all there is.
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != "limbs.db" && e.Name() != "events" && e.Name() != "checkpoints" {
			t.Errorf("state dir holds %s: the control plane made something of a sandbox's", e.Name())
		}
	}
}
