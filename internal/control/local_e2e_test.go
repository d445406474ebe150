package control_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/testbin"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/conformance"
	"github.com/limbs-dev/limbs/internal/control"
	"github.com/limbs-dev/limbs/internal/provider/local"
	"github.com/limbs-dev/limbs/internal/wire"
)

const e2eToken = "control-e2e-token"

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

// limbsdBinary is cmd/limbsd, static as shipped.
func limbsdBinary(t testing.TB) string { return testbin.Path(t, "limbsd", false) }

// plane is a control plane with the local provider over real HTTP.
type plane struct {
	srv   *control.Server
	ts    *httptest.Server
	c     *client.Client
	dir   string
	local *local.Provider
}

// stateDir is short: socket paths must stay under ~108 bytes.
func stateDir(t testing.TB) string {
	dir, err := os.MkdirTemp("", "lc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func newPlane(t testing.TB, dir, isolation string, pool map[string]int) *plane {
	t.Helper()
	lp, err := local.New(local.Options{Root: filepath.Join(dir, "sandboxes"), Isolation: isolation, Hide: []string{dir}, LimbsdPath: limbsdBinary(t)})
	if err != nil {
		t.Skipf("local provider with isolation %s unavailable here: %v", isolation, err)
	}
	srv, err := control.New(context.Background(), control.Options{
		StateDir:  dir,
		Token:     e2eToken,
		Providers: map[string]control.Provider{"local": lp},
		Pool:      pool,
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	c, err := client.New(ts.URL, e2eToken, "")
	if err != nil {
		t.Fatal(err)
	}
	p := &plane{srv: srv, ts: ts, c: c, dir: dir, local: lp}
	t.Cleanup(p.close)
	return p
}

// close ends the control plane without removing sandboxes, as a crash
// would; only warm pool sandboxes, which no test owns, are removed.
func (p *plane) close() {
	if p.ts != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := p.srv.DrainPool(ctx); err != nil {
			panic("draining the warm pool: " + err.Error())
		}
		p.ts.Close()
		p.srv.Close()
		p.ts = nil
	}
}

// removeAll removes every sandbox this test made, however it ended, so that
// no process is left behind.
func removeAll(t testing.TB, dir string) {
	t.Cleanup(func() {
		lp, err := local.New(local.Options{Root: filepath.Join(dir, "sandboxes"), Isolation: local.IsolateNone})
		if err != nil {
			t.Error(err)
			return
		}
		entries, _ := os.ReadDir(filepath.Join(dir, "sandboxes"))
		for _, e := range entries {
			if err := lp.Remove(context.Background(), e.Name()); err != nil && !errors.Is(err, wire.ErrNotFound) {
				t.Errorf("cleanup: removing %s: %v", e.Name(), err)
			}
		}
	})
}

func (p *plane) create(t testing.TB, req wire.CreateSandbox) wire.Sandbox {
	t.Helper()
	var sb wire.Sandbox
	if err := p.c.JSON(context.Background(), http.MethodPost, "/sandboxes", req, &sb); err != nil {
		t.Fatalf("create: %v", err)
	}
	return sb
}

func (p *plane) get(t *testing.T, id string) wire.Sandbox {
	t.Helper()
	var sb wire.Sandbox
	if err := p.c.JSON(context.Background(), http.MethodGet, "/sandboxes/"+id, nil, &sb); err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return sb
}

func (p *plane) sandboxClient(t testing.TB, id string) *client.Client {
	c, err := client.New(p.ts.URL, e2eToken, "/sandboxes/"+id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pidOf returns the sandbox's process id (local ProviderID is "pid:N").
func (p *plane) pidOf(t *testing.T, id string) int {
	t.Helper()
	inst, err := p.local.Inspect(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimPrefix(inst.ProviderID, "pid:"))
	if err != nil {
		t.Fatalf("provider id %q", inst.ProviderID)
	}
	return pid
}

func exec1(t *testing.T, c *client.Client, session, command string) wire.Result {
	t.Helper()
	yield := 30.0
	r, err := c.Exec(context.Background(), session, wire.Exec{Command: command, YieldAfter: &yield})
	if err != nil {
		t.Fatalf("exec %q: %v", command, err)
	}
	if r.Status != wire.StatusExited {
		t.Fatalf("exec %q: status %s", command, r.Status)
	}
	return r
}

func processGone(pid int) bool {
	err := syscall.Kill(pid, 0)
	if errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	_, after, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(after, "Z")
}

func TestLocalConformance(t *testing.T) {
	for _, iso := range []string{local.IsolateNone, local.IsolateBwrap} {
		t.Run(iso, func(t *testing.T) {
			dir := stateDir(t)
			removeAll(t, dir)
			p := newPlane(t, dir, iso, nil)
			sb := p.create(t, wire.CreateSandbox{Name: "conf"})
			if iso == local.IsolateNone && !strings.Contains(sb.Message, "is NOT isolated") {
				t.Errorf("an unisolated sandbox's message does not say so: %q", sb.Message)
			}
			if iso == local.IsolateBwrap && strings.Contains(sb.Message, "NOT isolated") {
				t.Errorf("an isolated sandbox says it is not: %q", sb.Message)
			}
			pid := p.pidOf(t, sb.ID)

			// The suite's cases run in parallel: the group waits for them.
			t.Run("suite", func(t *testing.T) { conformance.Run(t, p.sandboxClient(t, sb.ID)) })

			if err := p.c.JSON(context.Background(), http.MethodDelete, "/sandboxes/"+sb.ID, nil, nil); err != nil {
				t.Fatal(err)
			}
			if !processGone(pid) {
				t.Errorf("limbsd process %d still there after delete", pid)
			}
			entries, _ := os.ReadDir(filepath.Join(dir, "sandboxes"))
			if len(entries) != 0 {
				t.Errorf("left in the state dir after delete: %v", entries)
			}
		})
	}
}

func TestLocalBwrapConfinesWrites(t *testing.T) {
	dir := stateDir(t)
	removeAll(t, dir)
	p := newPlane(t, dir, local.IsolateBwrap, nil)
	sb := p.create(t, wire.CreateSandbox{})
	c := p.sandboxClient(t, sb.ID)
	s, err := c.CreateSession(context.Background(), wire.CreateSession{Name: "main"})
	if err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(wd, "written-from-sandbox") // /tmp is private: write to the source tree
	tests := []struct {
		name, command string
		exit          int
	}{
		{"write in the workspace", "echo hi > in-workspace && cat in-workspace", 0},
		{"write outside the workspace", "echo hi > " + outside, 1},
		{"write to /etc", "echo hi > /etc/limbs-test", 1},
		{"private /tmp", "echo hi > /tmp/x && cat /tmp/x", 0},
		{"control plane state is hidden", "test ! -e " + filepath.Join(dir, "limbs.db"), 0},
		{"no network but loopback", "test \"$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ')\" = lo", 0},
		{"no capabilities", "grep -q '^CapEff:[[:space:]]*0*$' /proc/self/status", 0},
		{"cannot remount the root", "mount -o remount,rw / 2>/dev/null", 1},
		{"own pid namespace", "test ! -e /proc/1/cwd || test \"$(cat /proc/1/comm)\" = bwrap", 0},
	}
	// Host daemons' sockets (Docker's is root on the host) are out of reach.
	if socks, _ := filepath.Glob("/run/*.sock"); len(socks) > 0 {
		tests = append(tests, struct {
			name, command string
			exit          int
		}{"host sockets masked", "test ! -e " + socks[0], 0})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := exec1(t, c, s.ID, tc.command)
			if r.ExitCode == nil || (*r.ExitCode == 0) != (tc.exit == 0) {
				t.Errorf("%q exited %v, want %d; output %q", tc.command, r.ExitCode, tc.exit, r.Output)
			}
		})
	}
	if _, err := os.Stat(outside); err == nil {
		t.Errorf("the sandbox wrote %s on the host", outside)
		os.Remove(outside)
	}
	// How the sandbox is started again is out of its reach: a sandbox that
	// could rewrite it could restart itself unisolated.
	meta := filepath.Join(dir, "sandboxes", sb.ID, "sandbox.json")
	before, err := os.ReadFile(meta)
	if err != nil {
		t.Fatal(err)
	}
	exec1(t, c, s.ID, "echo '{\"isolated\": false}' > "+meta+" 2>/dev/null; true")
	if after, _ := os.ReadFile(meta); string(after) != string(before) {
		t.Errorf("the sandbox rewrote its own %s", meta)
	}
}

// A daemon that dies is brought back, and its sessions with their cwd and
// exported environment.
func TestLocalDaemonDeathRecovered(t *testing.T) {
	dir := stateDir(t)
	removeAll(t, dir)
	p := newPlane(t, dir, local.IsolateAuto, nil)
	sb := p.create(t, wire.CreateSandbox{})
	c := p.sandboxClient(t, sb.ID)
	if _, err := c.CreateSession(context.Background(), wire.CreateSession{Name: "main"}); err != nil {
		t.Fatal(err)
	}
	exec1(t, c, "main", "mkdir -p sub && cd sub && export KEPT=yes")
	waitSessionSaved(t, filepath.Join(dir, "sandboxes", sb.ID, "state"), "/sub", "KEPT")
	pid := p.pidOf(t, sb.ID)
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testbin.Eventually(t, "sandbox recovered", time.Minute, func() bool {
		got := p.get(t, sb.ID)
		return got.Status == wire.SandboxRunning && got.Reason == "daemon_exited"
	})
	if got := p.get(t, sb.ID); !strings.Contains(got.Message, "recovered after daemon_exited") {
		t.Errorf("message after recovery: %q", got.Message)
	}
	r := exec1(t, c, "main", "echo $KEPT; basename $PWD")
	if got := strings.Fields(r.Output); len(got) != 2 || got[0] != "yes" || got[1] != "sub" {
		t.Errorf("after recovery the session shows %q, want KEPT=yes and cwd sub", r.Output)
	}
}

// A control plane that goes away leaves its sandboxes running; the next one
// on the same state dir re-adopts them, with their sessions.
func TestLocalReadoption(t *testing.T) {
	dir := stateDir(t)
	removeAll(t, dir)
	p1 := newPlane(t, dir, local.IsolateAuto, nil)
	sb := p1.create(t, wire.CreateSandbox{Name: "survivor"})
	c1 := p1.sandboxClient(t, sb.ID)
	if _, err := c1.CreateSession(context.Background(), wire.CreateSession{Name: "main"}); err != nil {
		t.Fatal(err)
	}
	exec1(t, c1, "main", "export MARK=before-restart")
	pid := p1.pidOf(t, sb.ID)
	p1.close()

	p2 := newPlane(t, dir, local.IsolateAuto, nil)
	if got := p2.get(t, "survivor"); got.Status != wire.SandboxRunning {
		t.Fatalf("after restart: %+v", got)
	}
	if p2.pidOf(t, sb.ID) != pid {
		t.Errorf("the sandbox was restarted instead of re-adopted")
	}
	r := exec1(t, p2.sandboxClient(t, sb.ID), "main", "echo $MARK")
	if strings.TrimSpace(r.Output) != "before-restart" {
		t.Errorf("session after re-adoption prints %q", r.Output)
	}
	// A re-adopted process that dies is still watched.
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testbin.Eventually(t, "re-adopted sandbox recovered", time.Minute, func() bool {
		got := p2.get(t, sb.ID)
		return got.Status == wire.SandboxRunning && got.Reason == "daemon_exited"
	})
}

func TestLocalWarmPool(t *testing.T) {
	dir := stateDir(t)
	removeAll(t, dir)
	p := newPlane(t, dir, local.IsolateAuto, map[string]int{"default": 1})
	var l wire.SandboxList
	testbin.Eventually(t, "pool filled", time.Minute, func() bool {
		entries, _ := os.ReadDir(filepath.Join(dir, "sandboxes"))
		if len(entries) != 1 {
			return false
		}
		inst, err := p.local.Inspect(context.Background(), entries[0].Name())
		return err == nil && inst.State.Running
	})
	sb := p.create(t, wire.CreateSandbox{Image: "default"})
	if err := p.c.JSON(context.Background(), http.MethodGet, "/sandboxes", nil, &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Sandboxes) != 1 || l.Sandboxes[0].ID != sb.ID {
		t.Errorf("sandboxes listed: %+v", l.Sandboxes)
	}
	c := p.sandboxClient(t, sb.ID)
	if _, err := c.CreateSession(context.Background(), wire.CreateSession{Name: "main"}); err != nil {
		t.Fatal(err)
	}
	exec1(t, c, "main", "true")
}

// waitSessionSaved waits until limbsd has saved a session's cwd and
// exported environment under stateDir. It saves them just after answering
// (session.json, and the env file the shell writes after its end marker):
// a daemon killed in between loses the last command's cwd and exports.
// Waiting keeps the recovery tests about recovery, not that window.
func waitSessionSaved(t *testing.T, stateDir, cwd, envName string) {
	t.Helper()
	testbin.Eventually(t, "session cwd and env saved", time.Minute, func() bool {
		dirs, _ := filepath.Glob(filepath.Join(stateDir, "sessions", "*"))
		for _, d := range dirs {
			js, _ := os.ReadFile(filepath.Join(d, "session.json"))
			env, _ := os.ReadFile(filepath.Join(d, "env"))
			if strings.Contains(string(js), cwd+"\"") && strings.Contains(string(env), envName) {
				return true
			}
		}
		return false
	})
}

// Stop ends the sandbox's processes; start brings limbsd back on the same
// state, with the sessions' cwd and exported environment.
func TestLocalStopStart(t *testing.T) {
	dir := stateDir(t)
	removeAll(t, dir)
	p := newPlane(t, dir, local.IsolateAuto, nil)
	sb := p.create(t, wire.CreateSandbox{})
	c := p.sandboxClient(t, sb.ID)
	if _, err := c.CreateSession(context.Background(), wire.CreateSession{Name: "main"}); err != nil {
		t.Fatal(err)
	}
	exec1(t, c, "main", "mkdir -p kept && cd kept && export STOPPED=no")
	pid := p.pidOf(t, sb.ID)
	var got wire.Sandbox
	if err := p.c.JSON(context.Background(), http.MethodPost, "/sandboxes/"+sb.ID+"/stop", nil, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status != wire.SandboxStopped || !processGone(pid) {
		t.Fatalf("after stop: status %s, process %d gone: %v", got.Status, pid, processGone(pid))
	}
	if err := p.c.JSON(context.Background(), http.MethodPost, "/sandboxes/"+sb.ID+"/start", nil, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status != wire.SandboxRunning || got.Reason != "" {
		t.Errorf("after start: %+v", got)
	}
	r := exec1(t, c, "main", "echo $STOPPED; basename $PWD")
	if r.Output != "no\nkept\n" {
		t.Errorf("after stop and start the session shows %q", r.Output)
	}
}
