package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// startOpts is start with the options under test.
func startOpts(t *testing.T, fp *fakeProvider, opts Options) *harness {
	t.Helper()
	if opts.StateDir == "" {
		opts.StateDir = t.TempDir()
	}
	opts.Token = testToken
	opts.Providers = map[string]Provider{"fake": fp}
	srv, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	c, err := client.New(ts.URL, testToken, "")
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{srv: srv, ts: ts, c: c, dir: opts.StateDir}
	t.Cleanup(h.close)
	return h
}

func (h *harness) tryCreate(req wire.CreateSandbox) (wire.Sandbox, error) {
	var sb wire.Sandbox
	err := h.c.JSON(context.Background(), http.MethodPost, "/sandboxes", req, &sb)
	return sb, err
}

// TestSandboxNames: a name is what NameRule says; anything a terminal
// would act on, and overlong names, are a 400 saying the rule.
func TestSandboxNames(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	h := startOpts(t, fp, Options{})
	for _, name := range []string{"dev", "a.b-c_1", "X", strings.Repeat("n", 63)} {
		if _, err := h.tryCreate(wire.CreateSandbox{Name: name}); err != nil {
			t.Errorf("name %q: %v, want it accepted", name, err)
		}
	}
	bad := map[string]string{
		"escape":     "evil\x1b]0;pwned\x07",
		"colour":     "\x1b[31mred",
		"nul":        "a\x00b",
		"newline":    "a\nb",
		"5000 chars": strings.Repeat("a", 5000),
		"64 chars":   strings.Repeat("a", 64),
		"space":      "a b",
		"slash":      "a/b",
		"leading -":  "-rf",
		"C1 CSI":     "a\u009b31m",
	}
	for what, name := range bad {
		t.Run(what, func(t *testing.T) {
			_, err := h.tryCreate(wire.CreateSandbox{Name: name})
			if !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), "letters, digits") {
				t.Fatalf("name %q: %v, want 400 bad_request saying the rule", name, err)
			}
			if strings.ContainsAny(err.Error(), "\x1b\x00\n\u009b") {
				t.Errorf("the error repeats the raw name: %q", err.Error())
			}
		})
	}
	if n := len(h.list(t)); n != 4 {
		t.Errorf("%d sandboxes, want the 4 good ones", n)
	}
}

// TestSandboxEnv: env entries no process can carry, and the names limbs
// starts limbsd with, are a 400 that says what to change (a NUL in a name
// was a 500, and LIMBSD_FILES_WORKER made limbsd start as its own worker).
func TestSandboxEnv(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	h := startOpts(t, fp, Options{})
	if _, err := h.tryCreate(wire.CreateSandbox{Env: map[string]string{"GOOD_1": "a=b c"}}); err != nil {
		t.Fatalf("a plain env entry: %v", err)
	}
	for what, env := range map[string]map[string]string{
		"nul in name":   {"A\x00B": "x"},
		"equals":        {"A=B": "x"},
		"digit first":   {"1A": "x"},
		"empty":         {"": "x"},
		"worker marker": {"LIMBSD_FILES_WORKER": "1"},
		"token":         {"LIMBS_TOKEN": "t"},
		"nul in value":  {"A": "x\x00y"},
	} {
		t.Run(what, func(t *testing.T) {
			if _, err := h.tryCreate(wire.CreateSandbox{Env: env}); !errors.Is(err, wire.ErrBadRequest) {
				t.Fatalf("env %q: %v, want 400 bad_request", env, err)
			}
		})
	}
}

// TestHostWorkspacePolicy: through the HTTP API, host directories that
// would give a sandbox the host (system paths, the control plane's own
// state) are refused however they are spelled, and --workspace-root
// restricts the rest.
func TestHostWorkspacePolicy(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	base := t.TempDir()
	state := filepath.Join(base, "state")
	project := filepath.Join(base, "project")
	links := filepath.Join(base, "links")
	for _, d := range []string{state, project, links, filepath.Join(state, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(name, target string) string {
		p := filepath.Join(links, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	toEtc := link("etc", "/etc")
	toState := link("state", state)
	toRoot := link("root", "/")
	toProject := link("project", project)
	h := startOpts(t, fp, Options{StateDir: state})

	refused := []struct{ name, dir, why string }{
		{"root", "/", "contains"},
		{"etc", "/etc", "is the host's system directory /etc"},
		{"etc via ..", "/etc/../etc", "/etc"},
		{"inside etc", "/etc/ssh", "inside the host's system directory /etc"},
		{"symlink to etc", toEtc, "resolves to /etc"},
		{"symlink to root", toRoot, "resolves to /"},
		{"proc", "/proc", "/proc"},
		{"proc self ..", "/proc/self/..", "/proc"},
		{"proc self root", "/proc/self/root", "/proc"},
		{"sys", "/sys", "/sys"},
		{"dev", "/dev", "/dev"},
		{"root's home", "/root", "/root"},
		{"var (holds /var/lib/docker)", "/var", "contains"},
		{"docker state", "/var/lib/docker", "/var/lib/docker"},
		{"run", "/run", "/run"},
		{"usr", "/usr", "/usr"},
		{"usr local", "/usr/local", "/usr"},
		{"bin", "/bin", "/bin"},
		{"lib", "/lib", "/lib"},
		{"state dir", state, "state directory"},
		{"inside the state dir", filepath.Join(state, "sub"), "state directory"},
		{"above the state dir", base, "state directory"},
		{"symlink to the state dir", toState, "state directory"},
		{"relative", "project", "absolute"},
		{"missing", filepath.Join(base, "missing"), "create the directory first"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.tryCreate(wire.CreateSandbox{Workspace: tc.dir})
			if tc.name == "relative" {
				// Not absolute: a volume name, the provider's to judge.
				return
			}
			if !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), tc.why) {
				t.Errorf("workspace %s: %v, want 400 bad_request mentioning %q", tc.dir, err, tc.why)
			}
		})
	}
	if _, err := h.tryCreate(wire.CreateSandbox{Workspace: project}); err != nil {
		t.Errorf("a project directory: %v", err)
	}
	// What the provider gets is the resolved path, never the symlink.
	sb, err := h.tryCreate(wire.CreateSandbox{Workspace: toProject})
	if err != nil {
		t.Fatalf("a symlink to a project directory: %v", err)
	}
	fp.mu.Lock()
	got := fp.sandboxes[sb.ID].spec.Workspace
	fp.mu.Unlock()
	if got != project {
		t.Errorf("the provider got workspace %q, want the resolved %q", got, project)
	}

	t.Run("workspace roots", func(t *testing.T) {
		rootA, rootB := filepath.Join(base, "ra"), filepath.Join(base, "rb")
		inA := filepath.Join(rootA, "p1")
		for _, d := range []string{inA, rootB} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		escape := filepath.Join(rootA, "escape")
		if err := os.Symlink(project, escape); err != nil {
			t.Fatal(err)
		}
		fp2 := newFakeProvider()
		t.Cleanup(fp2.closeAll)
		h2 := startOpts(t, fp2, Options{StateDir: filepath.Join(base, "state2"), WorkspaceRoots: []string{rootA, rootB}})
		if _, err := h2.tryCreate(wire.CreateSandbox{Workspace: inA}); err != nil {
			t.Errorf("a directory inside a root: %v", err)
		}
		for _, tc := range []struct{ dir, why string }{
			{project, "outside every --workspace-root"},
			{escape, "outside every --workspace-root"},
			{rootA, "workspace root"},
			{rootB + "/../links", "outside every --workspace-root"},
			{"/etc", "system directory"},
		} {
			if _, err := h2.tryCreate(wire.CreateSandbox{Workspace: tc.dir}); !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), tc.why) {
				t.Errorf("workspace %s with roots: %v, want 400 mentioning %q", tc.dir, err, tc.why)
			}
		}
	})
}

// TestMaxSandboxes: past --max-sandboxes a create is 429 too_many saying
// how to get room; warm pool sandboxes do not count until claimed, and a
// removal makes room again.
func TestMaxSandboxes(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	h := startOpts(t, fp, Options{MaxSandboxes: 2, Pool: map[string]int{"img": 2}, DefaultImage: "img"})
	testbin.Eventually(t, "pool filled", 30*time.Second, func() bool { return h.srv.PoolReady("img") == 2 })
	a := h.create(t, wire.CreateSandbox{Name: "a"}) // from the pool
	h.create(t, wire.CreateSandbox{Name: "b", Image: "other"})
	for _, req := range []wire.CreateSandbox{{Name: "c", Image: "other"}, {Name: "d"}} {
		var re *wire.RemoteError
		_, err := h.tryCreate(req)
		if !errors.Is(err, wire.ErrTooMany) || !errors.As(err, &re) || re.Code != "too_many" ||
			!strings.Contains(err.Error(), "--max-sandboxes") || !strings.Contains(err.Error(), "limbs sandbox rm") {
			t.Errorf("create %s past the cap: %v, want 429 too_many saying how to get room", req.Name, err)
		}
	}
	if n := len(h.list(t)); n != 2 {
		t.Errorf("%d sandboxes listed, want 2", n)
	}
	if err := h.c.JSON(context.Background(), http.MethodDelete, "/sandboxes/"+a.ID, nil, nil); err != nil {
		t.Fatal(err)
	}
	h.create(t, wire.CreateSandbox{Name: "c", Image: "other"})
}

func TestTooManyIs429(t *testing.T) {
	status, code := wire.StatusOf(fmt.Errorf("x: %w", wire.ErrTooMany))
	if status != http.StatusTooManyRequests || code != "too_many" {
		t.Errorf("ErrTooMany maps to %d %s", status, code)
	}
}

// rawRequest writes head (request line and headers) on a fresh
// connection, then body in the background, and returns the status line
// of the answer and the connection.
func rawRequest(t *testing.T, addr, head string, body io.Reader) (string, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	if body != nil {
		go func() { _, _ = io.Copy(c, body) }()
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "error: " + err.Error(), c
	}
	return strings.TrimSpace(line), c
}

// TestBodyLimits: a body above the route's limit is refused before it is
// read (a declared length at once, a chunked one once it passes the
// limit), forwarded or not; unauthenticated requests get their connection
// closed; a body that does not arrive is cut after BodyTimeout, while a
// long answer to a body that did arrive is not.
func TestBodyLimits(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	h := startOpts(t, fp, Options{BodyTimeout: time.Second})
	sb := h.create(t, wire.CreateSandbox{Name: "box"})
	addr := strings.TrimPrefix(h.ts.URL, "http://")
	auth := "Authorization: Bearer " + testToken + "\r\n"

	t.Run("declared length over the limit, nothing sent", func(t *testing.T) {
		for _, path := range []string{"/v1/sandboxes", "/v1/sandboxes/box/sessions/main/exec", "/v1/sandboxes/box/files/edit"} {
			line, _ := rawRequest(t, addr, "POST "+path+" HTTP/1.1\r\nHost: x\r\n"+auth+"Content-Length: 100000000\r\n\r\n", nil)
			if !strings.Contains(line, " 413 ") {
				t.Errorf("%s with Content-Length 100 MB and no body sent: %q, want 413 at once", path, line)
			}
		}
	})
	t.Run("chunked over the limit", func(t *testing.T) {
		for _, path := range []string{"/v1/sandboxes"} {
			// A JSON string that never ends: only the limit stops it.
			big := io.MultiReader(strings.NewReader(`{"image":"`), io.LimitReader(zeroReader{}, 20<<20))
			pr, pw := io.Pipe()
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := big.Read(buf)
					if n > 0 {
						if _, werr := fmt.Fprintf(pw, "%x\r\n%s\r\n", n, buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						_, _ = io.WriteString(pw, "0\r\n\r\n")
						pw.Close()
						return
					}
				}
			}()
			t.Cleanup(func() { pr.Close() })
			line, _ := rawRequest(t, addr, "POST "+path+" HTTP/1.1\r\nHost: x\r\n"+auth+"Transfer-Encoding: chunked\r\n\r\n", pr)
			if !strings.Contains(line, " 413 ") {
				t.Errorf("%s with a 20 MB chunked body: %q, want 413", path, line)
			}
		}
	})
	t.Run("chunked forwarded over the limit", func(t *testing.T) {
		// The answer races the cut (the sandbox may answer the truncated
		// body first); what holds is that no more than the limit reaches it.
		pr, pw := io.Pipe()
		go func() {
			_, _ = io.Copy(pw, io.LimitReader(zeroReader{}, 20<<20))
			pw.Close()
		}()
		t.Cleanup(func() { pr.Close() })
		resp, err := h.c.Do(context.Background(), http.MethodPost, "/sandboxes/box/sessions/main/exec", pr, "application/json")
		var e echo
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&e)
			resp.Body.Close()
			if err == nil && e.Body > maxSessionBody {
				t.Errorf("the sandbox received %d bytes of a chunked body, over the %d limit", e.Body, maxSessionBody)
			}
		} // else refused: 413, or the connection cut at the limit
	})
	t.Run("uploads have no limit", func(t *testing.T) {
		var e echo
		body := io.LimitReader(zeroReader{}, 70<<20)
		resp, err := h.c.Do(context.Background(), http.MethodPut, "/sandboxes/box/files?path=/big", body, "")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&e)
			resp.Body.Close()
		}
		if err != nil || e.Body != 70<<20 {
			t.Errorf("a 70 MB upload: %+v, %v; want it forwarded whole", e, err)
		}
	})
	t.Run("unauthenticated connection closed", func(t *testing.T) {
		line, c := rawRequest(t, addr, "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n", nil)
		if !strings.Contains(line, " 401 ") {
			t.Fatalf("no token: %q", line)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Errorf("after the 401 the connection stayed open: %v", err)
		}
	})
	t.Run("slow body cut", func(t *testing.T) {
		line, _ := rawRequest(t, addr, "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n"+auth+"Content-Length: 50\r\n\r\n{", nil)
		if !strings.Contains(line, " 400 ") {
			t.Errorf("a body that never arrives: %q, want 400 after the body timeout", line)
		}
	})
	t.Run("long answer after a body", func(t *testing.T) {
		var e echo
		err := h.c.JSON(context.Background(), http.MethodPost, "/sandboxes/"+sb.ID+"/sessions/main/exec?delay=2500ms", map[string]any{"command": "sleep 2"}, &e)
		if err != nil || e.Body == 0 {
			t.Errorf("an answer longer than the body timeout: %+v, %v", e, err)
		}
	})
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}
