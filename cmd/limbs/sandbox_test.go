package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/control"
	"github.com/limbs-dev/limbs/internal/journal"
	"github.com/limbs-dev/limbs/internal/runtime"
	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/shell"
	"github.com/limbs-dev/limbs/internal/wire"
)

// inProcess is a provider whose sandboxes are the real limbsd API (real
// shells) served in this process on a Unix socket in each sandbox's own
// directory, which only its Dial knows: enough to drive `limbs sandbox`
// and `--sandbox` against a real control plane.
type inProcess struct {
	t  *testing.T
	mu sync.Mutex
	sb map[string]*inProcessBox
}

type inProcessBox struct {
	spec sandbox.Spec
	dir  string // the socket, state/
	srv  *http.Server
	mgr  *shell.Manager
	jrn  *journal.Journal
}

func (p *inProcess) Name() string { return "inproc" }

func (p *inProcess) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// Short: socket paths must stay under ~108 bytes.
	dir, err := os.MkdirTemp("", "ipb")
	if err != nil {
		return sandbox.Instance{}, err
	}
	p.t.Cleanup(func() { os.RemoveAll(dir) })
	b := &inProcessBox{spec: spec, dir: dir}
	p.sb[spec.ID] = b
	return p.inst(b), b.start(p.t)
}

func (p *inProcess) Dial(ctx context.Context, id string) (net.Conn, error) {
	p.mu.Lock()
	b, err := p.get(id)
	if err == nil && b.srv == nil {
		err = fmt.Errorf("%s is stopped: %w", id, sandbox.ErrNotRunning)
	}
	p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	return d.DialContext(ctx, "unix", filepath.Join(b.dir, "limbsd.sock"))
}

func (b *inProcessBox) start(t *testing.T) error {
	// A journal, as limbsd keeps: limbs serve follows it into its event
	// log.
	j, err := journal.Open(journal.Options{Dir: filepath.Join(b.dir, "state", "journal")})
	if err != nil {
		return err
	}
	m, err := shell.NewManager(context.Background(), shell.Options{StateDir: filepath.Join(b.dir, "state"), Workdir: t.TempDir(), Journal: j})
	if err != nil {
		j.Close()
		return err
	}
	sock := filepath.Join(b.dir, "limbsd.sock")
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		m.Close()
		j.Close()
		return err
	}
	b.mgr, b.jrn = m, j
	b.srv = &http.Server{Handler: runtime.New(runtime.Options{Token: b.spec.Token, Manager: m, Journal: j})}
	go b.srv.Serve(ln)
	return nil
}

func (b *inProcessBox) stop() {
	if b.srv != nil {
		b.srv.Close()
		b.mgr.Close()
		b.jrn.Close()
		b.srv = nil
	}
}

func (p *inProcess) inst(b *inProcessBox) sandbox.Instance {
	return sandbox.Instance{ID: b.spec.ID, State: sandbox.State{Running: b.srv != nil},
		Labels: map[string]string{sandbox.LabelInstance: b.spec.Instance}}
}

func (p *inProcess) get(id string) (*inProcessBox, error) {
	b, ok := p.sb[id]
	if !ok {
		return nil, fmt.Errorf("%s: %w", id, wire.ErrNotFound)
	}
	return b, nil
}

func (p *inProcess) Start(ctx context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := p.get(id)
	if err != nil || b.srv != nil {
		return err
	}
	return b.start(p.t)
}

func (p *inProcess) Stop(ctx context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := p.get(id)
	if err == nil {
		b.stop()
	}
	return err
}

func (p *inProcess) Remove(ctx context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := p.get(id)
	if err == nil {
		b.stop()
		delete(p.sb, id)
	}
	return err
}

func (p *inProcess) Inspect(ctx context.Context, id string) (sandbox.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := p.get(id)
	if err != nil {
		return sandbox.Instance{}, err
	}
	return p.inst(b), nil
}

func (p *inProcess) List(ctx context.Context, instance string) ([]sandbox.Instance, error) {
	return nil, nil
}

func (p *inProcess) Events(ctx context.Context) (<-chan sandbox.Event, error) {
	return make(chan sandbox.Event), nil
}

// inProcessServe serves a real control plane (token "tok") with the
// inProcess provider over httptest, state in dir (a new short temporary
// directory when empty: socket paths must stay under ~108 bytes). wrap,
// when set, wraps the server's handler. Both are closed at cleanup.
func inProcessServe(t *testing.T, dir string, wrap func(*control.Server) http.Handler) (*httptest.Server, *control.Server) {
	t.Helper()
	if dir == "" {
		d, err := os.MkdirTemp("", "ips")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		dir = d
	}
	prov := &inProcess{t: t, sb: map[string]*inProcessBox{}}
	t.Cleanup(prov.closeAll)
	srv, err := control.New(context.Background(), control.Options{
		StateDir: dir, Token: "tok", Providers: map[string]control.Provider{"inproc": prov},
	})
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = srv
	if wrap != nil {
		h = wrap(srv)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(func() { ts.Close(); srv.Close() })
	return ts, srv
}

func (p *inProcess) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.sb {
		b.stop()
	}
}

// captureStdout runs f with os.Stdout going to a pipe and returns what f
// printed.
func captureStdout(t *testing.T, f func() int) (string, int) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	code := f()
	os.Stdout = old
	w.Close()
	return <-done, code
}

func TestSandboxCLI(t *testing.T) {
	ts, _ := inProcessServe(t, "", nil)
	ctx := context.Background()
	cli := func(args ...string) (string, int) {
		t.Helper()
		full := append([]string{"sandbox", args[0], "--addr", ts.URL, "--token", "tok"}, args[1:]...)
		return captureStdout(t, func() int { return run(ctx, full) })
	}

	out, code := cli("create", "--name", "dev")
	id := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(id, "sb_") {
		t.Fatalf("create printed %q, exit %d; want the sandbox id", out, code)
	}
	out, _ = cli("ls")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.Contains(lines[1], id) ||
		!strings.Contains(lines[1], " dev ") || !strings.Contains(lines[1], "running") {
		t.Errorf("ls printed:\n%s", out)
	}
	out, _ = cli("inspect", "dev")
	var sb wire.Sandbox
	if err := json.Unmarshal([]byte(out), &sb); err != nil || sb.ID != id {
		t.Errorf("inspect printed %q (%v)", out, err)
	}

	// The shared connection flags reach the sandbox through limbs serve.
	cn := &conn{addr: ts.URL, token: "tok", sandbox: "dev", sessionName: "main"}
	c, err := cn.client()
	if err != nil {
		t.Fatal(err)
	}
	sid, err := cn.session(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	yield := 10.0
	r, err := c.Exec(ctx, sid, wire.Exec{Command: "echo through serve", YieldAfter: &yield})
	if err != nil || r.Output != "through serve\n" {
		t.Errorf("exec through --sandbox: %+v, %v", r, err)
	}

	if out, code := cli("events", "dev"); code != 0 || !strings.HasPrefix(out, "1 ") || !strings.Contains(out, " sandbox.created") {
		t.Errorf("events: %q exit %d", out, code)
	}
	if out, code := cli("stop", "dev"); code != 0 || strings.TrimSpace(out) != "dev" {
		t.Errorf("stop: %q exit %d", out, code)
	}
	if out, _ := cli("ls"); !strings.Contains(out, "stopped") {
		t.Errorf("ls after stop:\n%s", out)
	}
	if _, code := cli("start", "dev"); code != 0 {
		t.Errorf("start: exit %d", code)
	}
	out, _ = cli("events", "--from", "2", "--type", "sandbox.*", "dev")
	if kinds := strings.Fields(out); len(kinds) != 8 || kinds[3] != "sandbox.stopped" || kinds[7] != "sandbox.started" {
		t.Errorf("events from 2: %q, want stopped then started", out)
	}
	if _, code := cli("rm", "dev", "sb_missing"); code != 1 {
		t.Errorf("rm of one known and one unknown sandbox: exit %d, want 1", code)
	}
	if out, _ := cli("ls", "-q"); strings.TrimSpace(out) != "" {
		t.Errorf("ls after rm: %q", out)
	}
	if _, code := cli("frobnicate"); code != 2 {
		t.Errorf("unknown verb: exit %d, want 2", code)
	}
	if _, code := cli("inspect"); code != 2 {
		t.Errorf("inspect without an id: exit %d, want 2", code)
	}
}

func TestWriteTable(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var b strings.Builder
	err := writeTable(&b, []wire.Sandbox{
		{ID: "sb_1", Name: "a", Provider: "docker", Image: "limbs/base:latest", Status: "running", CreatedAt: now.Add(-90 * time.Second)},
		{ID: "sb_2", Name: "b", Provider: "local", Image: "host", Status: "failed", Reason: "oom_killed", CreatedAt: now.Add(-time.Hour)},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	want := `ID    NAME  PROVIDER  IMAGE              STATUS   CREATED  REASON
sb_1  a     docker    limbs/base:latest  running  1m ago   -
sb_2  b     local     host               failed   1h ago   oom_killed
`
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
}

func FuzzPoolFlag(f *testing.F) {
	for _, s := range []string{"limbs/base:latest=2", "img=0", "a=b=3", "=1", "img=", "img=101", "img=-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		p := poolFlag{}
		if err := p.Set(v); err != nil {
			if len(p) != 0 {
				t.Errorf("Set(%q) failed but stored %v", v, p)
			}
			return
		}
		if len(p) != 1 {
			t.Fatalf("Set(%q) stored %v", v, p)
		}
		for image, n := range p {
			if image == "" || n < 0 || n > 100 || !strings.HasPrefix(v, image+"=") {
				t.Errorf("Set(%q) stored %q=%d", v, image, n)
			}
		}
	})
}
