package control

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/testbin"

	"github.com/google/go-cmp/cmp"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/wire"
)

const testToken = "control-test-token"

// harness is one control plane over real HTTP on 127.0.0.1.
type harness struct {
	srv *Server
	ts  *httptest.Server
	c   *client.Client
	dir string
}

func start(t *testing.T, dir string, fp *fakeProvider, pool map[string]int) *harness {
	t.Helper()
	srv, err := New(context.Background(), Options{
		StateDir:  dir,
		Token:     testToken,
		Providers: map[string]Provider{"fake": fp},
		Pool:      pool,
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	c, err := client.New(ts.URL, testToken, "")
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{srv: srv, ts: ts, c: c, dir: dir}
	t.Cleanup(h.close)
	return h
}

// close simulates a control plane that goes away without removing its
// sandboxes (the next one re-adopts them).
func (h *harness) close() {
	if h.ts == nil {
		return
	}
	h.ts.Close()
	h.srv.Close()
	h.ts = nil
}

func (h *harness) create(t *testing.T, req wire.CreateSandbox) wire.Sandbox {
	t.Helper()
	var sb wire.Sandbox
	if err := h.c.JSON(context.Background(), http.MethodPost, "/sandboxes", req, &sb); err != nil {
		t.Fatalf("create %+v: %v", req, err)
	}
	return sb
}

func (h *harness) get(t *testing.T, id string) wire.Sandbox {
	t.Helper()
	var sb wire.Sandbox
	if err := h.c.JSON(context.Background(), http.MethodGet, "/sandboxes/"+id, nil, &sb); err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return sb
}

func (h *harness) list(t *testing.T) []wire.Sandbox {
	t.Helper()
	var l wire.SandboxList
	if err := h.c.JSON(context.Background(), http.MethodGet, "/sandboxes", nil, &l); err != nil {
		t.Fatal(err)
	}
	return l.Sandboxes
}

func (h *harness) forward(id, path string) (echo, error) {
	var e echo
	err := h.c.JSON(context.Background(), http.MethodGet, "/sandboxes/"+id+path, nil, &e)
	return e, err
}

func TestCreateForwardRemove(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	h := start(t, t.TempDir(), fp, nil)

	sb := h.create(t, wire.CreateSandbox{Image: "img", Name: "alpha", Cpus: 2, MemoryMB: 256})
	if !strings.HasPrefix(sb.ID, "sb_") || sb.Status != wire.SandboxRunning || sb.Provider != "fake" {
		t.Fatalf("created %+v: want an sb_ id, status running, provider fake", sb)
	}
	want := wire.Limits{Cpus: 2, MemoryMB: 256, Network: "none"}
	if d := cmp.Diff(want, sb.Limits); d != "" {
		t.Errorf("limits (-want +got):\n%s", d)
	}
	if got := h.get(t, "alpha"); got.ID != sb.ID {
		t.Errorf("get by name gave %s, want %s", got.ID, sb.ID)
	}

	tests := []struct{ path, want string }{
		{"/sessions", "/v1/sessions"},
		{"/sessions/main/screen", "/v1/sessions/main/screen"},
		{"/files?path=/etc/hosts", "/v1/files"},
		{"/files/list?path=/&depth=1", "/v1/files/list"},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			for _, ref := range []string{sb.ID, "alpha"} {
				got, err := h.forward(ref, tc.path)
				if err != nil {
					t.Fatalf("forwarding %s through %s: %v", tc.path, ref, err)
				}
				if got.Path != tc.want || got.Sandbox != sb.ID {
					t.Errorf("limbsd saw %+v, want path %s in %s", got, tc.want, sb.ID)
				}
				if _, q, _ := strings.Cut(tc.path, "?"); got.Query != q {
					t.Errorf("query %q reached limbsd as %q", q, got.Query)
				}
			}
		})
	}

	err := h.c.JSON(context.Background(), http.MethodDelete, "/sandboxes/"+sb.ID, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ids := fp.ids(); len(ids) != 0 {
		t.Errorf("provider still has %v after delete", ids)
	}
	if _, err := os.Stat(filepath.Join(h.dir, "sandboxes", sb.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox dir left behind: %v", err)
	}
	if _, err := h.forward(sb.ID, "/sessions"); !errors.Is(err, wire.ErrNotFound) {
		t.Errorf("forward after delete: %v, want not_found", err)
	}
}

func TestRequestErrors(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	h := start(t, t.TempDir(), fp, nil)
	h.create(t, wire.CreateSandbox{Name: "taken"})
	noAuth, _ := client.New(h.ts.URL, "", "")
	wrongAuth, _ := client.New(h.ts.URL, "nope", "")
	ctx := context.Background()

	tests := []struct {
		name string
		c    *client.Client
		call func(c *client.Client) error
		want error
	}{
		{"no token", noAuth, func(c *client.Client) error { return c.JSON(ctx, "GET", "/sandboxes", nil, nil) }, wire.ErrUnauthorized},
		{"wrong token", wrongAuth, func(c *client.Client) error { return c.JSON(ctx, "GET", "/sandboxes", nil, nil) }, wire.ErrUnauthorized},
		{"forward without token", noAuth, func(c *client.Client) error { return c.JSON(ctx, "GET", "/sandboxes/taken/sessions", nil, nil) }, wire.ErrUnauthorized},
		{"health needs no token", noAuth, func(c *client.Client) error { _, err := c.Health(ctx); return err }, nil},
		{"unknown field", h.c, func(c *client.Client) error {
			return c.JSON(ctx, "POST", "/sandboxes", map[string]any{"imagee": "x"}, nil)
		}, wire.ErrBadRequest},
		{"unknown provider", h.c, func(c *client.Client) error {
			return c.JSON(ctx, "POST", "/sandboxes", wire.CreateSandbox{Provider: "vm"}, nil)
		}, wire.ErrBadRequest},
		{"bad network", h.c, func(c *client.Client) error {
			return c.JSON(ctx, "POST", "/sandboxes", wire.CreateSandbox{Network: "host"}, nil)
		}, wire.ErrBadRequest},
		{"name taken", h.c, func(c *client.Client) error {
			return c.JSON(ctx, "POST", "/sandboxes", wire.CreateSandbox{Name: "taken"}, nil)
		}, wire.ErrConflict},
		{"unknown sandbox", h.c, func(c *client.Client) error { return c.JSON(ctx, "GET", "/sandboxes/sb_nope", nil, nil) }, wire.ErrNotFound},
		{"forward to unknown sandbox", h.c, func(c *client.Client) error {
			return c.JSON(ctx, "GET", "/sandboxes/sb_nope/sessions", nil, nil)
		}, wire.ErrNotFound},
		{"unknown route", h.c, func(c *client.Client) error { return c.JSON(ctx, "GET", "/sandboxes/taken/nothing", nil, nil) }, wire.ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(tc.c)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestFailedCreateLeavesNothing(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	h := start(t, t.TempDir(), fp, nil)
	err := h.c.JSON(context.Background(), "POST", "/sandboxes", wire.CreateSandbox{Image: "broken"}, nil)
	if err == nil || !strings.Contains(err.Error(), "image broken does not start") {
		t.Fatalf("create of a broken image: %v, want the provider's reason", err)
	}
	if l := h.list(t); len(l) != 0 {
		t.Errorf("failed create left sandboxes: %+v", l)
	}
	entries, _ := os.ReadDir(filepath.Join(h.dir, "sandboxes"))
	if len(entries) != 0 {
		t.Errorf("failed create left directories: %v", entries)
	}
}

func TestProviderNoteIsTheMessage(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	h := start(t, t.TempDir(), fp, nil)
	sb := h.create(t, wire.CreateSandbox{Env: map[string]string{"NOTE": "not isolated"}})
	if want := "fake sandbox " + sb.ID + " note: not isolated"; sb.Message != want {
		t.Errorf("message %q, want %q", sb.Message, want)
	}
}

func TestStopStart(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	h := start(t, t.TempDir(), fp, nil)
	sb := h.create(t, wire.CreateSandbox{})
	ctx := context.Background()
	var got wire.Sandbox
	if err := h.c.JSON(ctx, "POST", "/sandboxes/"+sb.ID+"/stop", nil, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status != wire.SandboxStopped {
		t.Errorf("status after stop %q", got.Status)
	}
	_, err := h.forward(sb.ID, "/sessions")
	if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "limbs sandbox start") {
		t.Errorf("forward to a stopped sandbox: %v, want unavailable saying how to start it", err)
	}
	if err := h.c.JSON(ctx, "POST", "/sandboxes/"+sb.ID+"/start", nil, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status != wire.SandboxRunning {
		t.Errorf("status after start %q", got.Status)
	}
	if _, err := h.forward(sb.ID, "/sessions"); err != nil {
		t.Errorf("forward after start: %v", err)
	}
}

func TestRecoveryAfterDeath(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	h := start(t, t.TempDir(), fp, nil)
	sb := h.create(t, wire.CreateSandbox{})

	fp.kill(sb.ID, "oom_killed", true)
	testbin.Eventually(t, "sandbox recovered", 30*time.Second, func() bool {
		got := h.get(t, sb.ID)
		return got.Status == wire.SandboxRunning && got.Reason == "oom_killed"
	})
	got := h.get(t, sb.ID)
	if !strings.HasPrefix(got.Message, "recovered after oom_killed at ") {
		t.Errorf("message after recovery %q", got.Message)
	}
	if _, err := h.forward(sb.ID, "/sessions"); err != nil {
		t.Errorf("forward after recovery: %v", err)
	}
	kinds := h.lifecycle(t, sb.ID)
	if d := cmp.Diff([]string{"created:", "died:oom_killed", "recovered:oom_killed"}, kinds); d != "" {
		t.Errorf("event log (-want +got):\n%s", d)
	}
}

func TestUnreachableIs503WithReason(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	h := start(t, t.TempDir(), fp, nil)

	t.Run("died without an event", func(t *testing.T) {
		sb := h.create(t, wire.CreateSandbox{})
		fp.kill(sb.ID, "daemon_exited", false)
		_, err := h.forward(sb.ID, "/sessions")
		if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "daemon_exited") {
			t.Errorf("forward to a dead sandbox: %v, want unavailable naming daemon_exited", err)
		}
	})
	t.Run("cannot be brought back", func(t *testing.T) {
		sb := h.create(t, wire.CreateSandbox{})
		defer func(b time.Duration) { recoverBackoff = b }(recoverBackoff)
		recoverBackoff = time.Millisecond
		fp.setStartErr(errors.New("disk full"))
		defer fp.setStartErr(nil)
		fp.kill(sb.ID, "oom_killed", true)
		testbin.Eventually(t, "recovery given up", 30*time.Second, func() bool {
			return strings.Contains(h.get(t, sb.ID).Message, "could not be restarted")
		})
		got := h.get(t, sb.ID)
		if got.Status != wire.SandboxFailed || got.Reason != "oom_killed" || !strings.Contains(got.Message, "disk full") {
			t.Errorf("sandbox after failed recovery: %+v", got)
		}
		_, err := h.forward(sb.ID, "/sessions")
		if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "oom_killed") {
			t.Errorf("forward to a failed sandbox: %v, want unavailable naming oom_killed", err)
		}
	})
}

func TestRestartReadoptsAndRemovesOrphans(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	dir := t.TempDir()
	h1 := start(t, dir, fp, nil)
	kept := h1.create(t, wire.CreateSandbox{Name: "kept"})
	stopped := h1.create(t, wire.CreateSandbox{Name: "stopped"})
	if err := h1.c.JSON(context.Background(), "POST", "/sandboxes/stopped/stop", nil, nil); err != nil {
		t.Fatal(err)
	}
	died := h1.create(t, wire.CreateSandbox{Name: "died"})
	instance := h1.srv.Instance()
	h1.close()

	// While no control plane runs: one sandbox dies, one of ours appears
	// that the registry does not know (a create that crashed before it was
	// recorded), and one belongs to another control plane.
	fp.kill(died.ID, "daemon_exited", false)
	for _, spec := range []sandbox.Spec{
		{ID: "sb_orphan", Instance: instance},
		{ID: "sb_foreign", Instance: "i_someoneelse"},
	} {
		if _, err := fp.Create(context.Background(), spec); err != nil {
			t.Fatal(err)
		}
	}

	h2 := start(t, dir, fp, nil)
	if h2.srv.Instance() != instance {
		t.Fatalf("instance id changed across restart")
	}
	if _, err := h2.forward(kept.ID, "/sessions"); err != nil {
		t.Errorf("re-adopted sandbox not usable: %v", err)
	}
	if got := h2.get(t, stopped.ID); got.Status != wire.SandboxStopped {
		t.Errorf("stopped sandbox came back as %q", got.Status)
	}
	testbin.Eventually(t, "dead sandbox recovered", 30*time.Second, func() bool { return h2.get(t, died.ID).Status == wire.SandboxRunning })
	if got := h2.get(t, died.ID); got.Reason != "daemon_exited" {
		t.Errorf("recovered sandbox reason %q, want daemon_exited", got.Reason)
	}
	ids := fp.ids()
	if slices.Contains(ids, "sb_orphan") {
		t.Errorf("orphan of our instance not removed")
	}
	if !slices.Contains(ids, "sb_foreign") {
		t.Errorf("another instance's sandbox was touched")
	}
	if n := len(h2.list(t)); n != 3 {
		t.Errorf("%d sandboxes listed after restart, want 3", n)
	}
}

func TestWarmPool(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	h := start(t, t.TempDir(), fp, map[string]int{"img": 2})
	testbin.Eventually(t, "pool filled", 30*time.Second, func() bool { return len(fp.ids()) == 2 })
	testbin.Eventually(t, "pool sandboxes running", 30*time.Second, func() bool { return h.srv.PoolReady("img") == 2 })
	if l := h.list(t); len(l) != 0 {
		t.Errorf("pool sandboxes are listed: %+v", l)
	}
	pooled := fp.ids()

	sb := h.create(t, wire.CreateSandbox{Image: "img", Name: "fast"})
	if !slices.Contains(pooled, sb.ID) {
		t.Errorf("create did not take a pool sandbox: %s not in %v", sb.ID, pooled)
	}
	if sb.Name != "fast" || sb.Status != wire.SandboxRunning {
		t.Errorf("claimed sandbox %+v", sb)
	}
	if _, err := h.forward("fast", "/sessions"); err != nil {
		t.Errorf("claimed sandbox not usable: %v", err)
	}
	testbin.Eventually(t, "pool refilled", 30*time.Second, func() bool { return len(fp.ids()) == 3 })

	tests := []struct {
		name string
		req  wire.CreateSandbox
	}{
		{"other image", wire.CreateSandbox{Image: "other"}},
		{"env", wire.CreateSandbox{Image: "img", Env: map[string]string{"A": "1"}}},
		{"limits", wire.CreateSandbox{Image: "img", MemoryMB: 64}},
		{"workspace", wire.CreateSandbox{Image: "img", Workspace: t.TempDir()}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := fp.ids()
			got := h.create(t, tc.req)
			if slices.Contains(before, got.ID) {
				t.Errorf("a %s create took pool sandbox %s", tc.name, got.ID)
			}
		})
	}
}

func TestPoolShrinksOnRestart(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	dir := t.TempDir()
	h1 := start(t, dir, fp, map[string]int{"img": 2})
	testbin.Eventually(t, "pool filled", 30*time.Second, func() bool { return h1.srv.PoolReady("img") == 2 })
	h1.close()
	h2 := start(t, dir, fp, map[string]int{"img": 1})
	testbin.Eventually(t, "pool shrunk", 30*time.Second, func() bool { return len(fp.ids()) == 1 && h2.srv.PoolReady("img") == 1 })
}

// FuzzForwardedPath: whatever path a client sends, what reaches limbsd is
// the part after the sandbox's id, and nothing of the prefix.
func FuzzForwardedPath(f *testing.F) {
	for _, s := range []string{"/v1/sandboxes/sb_x/sessions", "/v1/sandboxes/sb_x/files/list", "/v1/sandboxes/", "/v1/sandboxes/sb_x", "//", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got := forwardedPath(p)
		if !strings.HasSuffix(p, got) {
			t.Errorf("forwardedPath(%q) = %q, not a suffix of the request path", p, got)
		}
		if strings.HasPrefix(p, "/v1/sandboxes/") {
			rest := strings.TrimPrefix(p, "/v1/sandboxes/")
			if id, after, ok := strings.Cut(rest, "/"); ok && got != after {
				t.Errorf("forwardedPath(%q) = %q, want %q (after id %q)", p, got, after, id)
			}
		}
	})
}

// BenchmarkForwardOverhead isolates what forwarding through the control
// plane costs: the same trivial request to a sandbox daemon that answers at
// once, straight on its Unix socket and through the control plane over TCP.
//
//	go test -run '^$' -bench ForwardOverhead ./internal/control/
func BenchmarkForwardOverhead(b *testing.B) {
	fp := newFakeProvider()
	b.Cleanup(fp.closeAll)
	dir, err := os.MkdirTemp("", "fwd")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	srv, err := New(context.Background(), Options{StateDir: dir, Token: testToken, Providers: map[string]Provider{"fake": fp}})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	b.Cleanup(func() { ts.Close(); srv.Close() })
	c, _ := client.New(ts.URL, testToken, "")
	var sb wire.Sandbox
	if err := c.JSON(context.Background(), "POST", "/sandboxes", wire.CreateSandbox{}, &sb); err != nil {
		b.Fatal(err)
	}
	rec, err := srv.db.Get(sb.ID)
	if err != nil {
		b.Fatal(err)
	}
	direct := client.NewDialed(func(ctx context.Context) (net.Conn, error) { return fp.Dial(ctx, rec.ID) }, rec.Token)
	via, _ := client.New(ts.URL, testToken, "/sandboxes/"+sb.ID)
	for _, tc := range []struct {
		name    string
		c       *client.Client
		noCalls bool
	}{{"direct", direct, false}, {"via-control", via, false}, {"via-control-without-event-log", via, true}} {
		b.Run(tc.name, func(b *testing.B) {
			srv.noCalls.Store(tc.noCalls)
			var e echo
			for b.Loop() {
				if err := tc.c.JSON(context.Background(), "POST", "/sessions/main/exec", nil, &e); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Concurrent creates with one name: exactly one wins, whether it comes from
// the warm pool or not; the others get conflict.
func TestConcurrentCreatesOneName(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	h := start(t, t.TempDir(), fp, map[string]int{"img": 2})
	testbin.Eventually(t, "pool filled", 30*time.Second, func() bool { return h.srv.PoolReady("img") == 2 })
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		go func() {
			req := wire.CreateSandbox{Name: "same"}
			if i%2 == 0 {
				req.Image = "img" // these may come from the pool
			}
			errs <- h.c.JSON(context.Background(), "POST", "/sandboxes", req, nil)
		}()
	}
	won := 0
	for range n {
		err := <-errs
		switch {
		case err == nil:
			won++
		case !errors.Is(err, wire.ErrConflict):
			t.Errorf("create: %v, want success or conflict", err)
		}
	}
	if won != 1 {
		t.Errorf("%d creates named %q succeeded, want 1", won, "same")
	}
	if l := h.list(t); len(l) != 1 {
		t.Errorf("listed %d sandboxes, want 1", len(l))
	}
}

// A pool sandbox that dies is replaced, not waited for: it holds no one's
// work.
func TestPoolReplacesFailedMember(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	h := start(t, t.TempDir(), fp, map[string]int{"img": 1})
	testbin.Eventually(t, "pool filled", 30*time.Second, func() bool { return h.srv.PoolReady("img") == 1 })
	dead := fp.ids()[0]
	fp.setStartErr(errors.New("cannot start"))
	fp.kill(dead, "daemon_exited", true)
	testbin.Eventually(t, "pool refilled with another sandbox", 30*time.Second, func() bool {
		ids := fp.ids()
		return h.srv.PoolReady("img") == 1 && len(ids) == 1 && ids[0] != dead
	})
	if l := h.list(t); len(l) != 0 {
		t.Errorf("pool sandboxes listed: %+v", l)
	}
}
