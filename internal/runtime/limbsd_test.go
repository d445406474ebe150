package runtime_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/testbin"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/conformance"
	"github.com/limbs-dev/limbs/internal/wire"
)

// daemon is a limbsd built from this tree and running in temp directories.
type daemon struct {
	cmd    *exec.Cmd
	dir    string
	stderr *testbin.Buffer
	exited chan struct{}
}

// TestMain removes the limbsd built for the tests when they end.
func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

// limbsdBinary is cmd/limbsd: static as shipped, or with the race detector
// when the tests run under -race, so that the end-to-end suite also hunts
// data races in the daemon.
func limbsdBinary(t *testing.T) string { return testbin.Path(t, "limbsd", raceEnabled) }

// startDaemon runs limbsd on a Unix socket in a fresh temp directory and
// stops it by PID when the test ends.
func startDaemon(t *testing.T, extra ...string) *daemon {
	return startDaemonEnv(t, "", extra...)
}

// startDaemonEnv is startDaemon with LIMBS_TOKEN set to token.
func startDaemonEnv(t *testing.T, token string, extra ...string) *daemon {
	t.Helper()
	// Short path: a Unix socket path has ~108 bytes.
	dir, err := os.MkdirTemp("", "limbsd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return startDaemonAt(t, dir, token, extra...)
}

// startDaemonAt runs limbsd with its socket and directories in dir (a
// second daemon on the dir of a dead one finds its state).
func startDaemonAt(t *testing.T, dir, token string, extra ...string) *daemon {
	t.Helper()
	bin := limbsdBinary(t)
	args := append([]string{
		"--listen", "unix://" + filepath.Join(dir, "limbsd.sock"),
		"--workdir", filepath.Join(dir, "work"),
		"--state-dir", filepath.Join(dir, "state"),
	}, extra...)
	d := &daemon{cmd: exec.Command(bin, args...), dir: dir, stderr: &testbin.Buffer{}, exited: make(chan struct{})}
	d.cmd.Stderr = d.stderr
	d.cmd.Env = append(os.Environ(), "LIMBS_TOKEN="+token)
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("starting limbsd: %v", err)
	}
	go func() { d.cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() {
		d.stop(t)
		if log := d.stderr.String(); strings.Contains(log, "WARNING: DATA RACE") {
			i := strings.Index(log, "WARNING: DATA RACE")
			t.Errorf("the race detector found a data race in limbsd:\n%s", log[max(0, i-100):min(len(log), i+6000)])
		}
		if t.Failed() {
			log := d.stderr.String()
			if len(log) > 8000 {
				log = "...\n" + log[len(log)-8000:]
			}
			t.Logf("limbsd log (end):\n%s", log)
		}
	})
	return d
}

// stop sends SIGTERM and waits; SIGKILL only if it does not stop.
func (d *daemon) stop(t *testing.T) {
	select {
	case <-d.exited:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(20 * time.Second):
		t.Errorf("limbsd (pid %d) did not stop on SIGTERM; killing it", d.cmd.Process.Pid)
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
}

// client waits for the daemon to answer and returns a client for it.
func (d *daemon) client(t *testing.T, token string) *client.Client {
	t.Helper()
	c, err := client.New("unix://"+filepath.Join(d.dir, "limbsd.sock"), token, "")
	if err != nil {
		t.Fatal(err)
	}
	testbin.Eventually(t, "limbsd answers on its socket", 30*time.Second, func() bool {
		select {
		case <-d.exited:
			t.Fatalf("limbsd exited before answering: %v\n%s", d.cmd.ProcessState, d.stderr.String())
		default:
		}
		_, err := c.Health(t.Context())
		return err == nil
	})
	return c
}

func TestLimbsdConformance(t *testing.T) {
	d := startDaemon(t, "--token", testToken)
	conformance.Run(t, d.client(t, testToken))
}

func TestLimbsdGeneratesToken(t *testing.T) {
	d := startDaemon(t)
	tokFile := filepath.Join(d.dir, "limbsd.token")
	c := d.client(t, "")
	tok, err := os.ReadFile(tokFile)
	if err != nil {
		t.Fatalf("no token file next to the socket: %v", err)
	}
	fi, err := os.Stat(tokFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", fi.Mode().Perm())
	}
	if _, err := c.ListSessions(t.Context()); err == nil {
		t.Errorf("listing sessions without the token worked")
	}
	authed, err := client.New("unix://"+filepath.Join(d.dir, "limbsd.sock"), strings.TrimSpace(string(tok)), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := authed.ListSessions(t.Context()); err != nil {
		t.Errorf("listing sessions with the generated token: %v", err)
	}
}

func TestLimbsdStopsCleanly(t *testing.T) {
	d := startDaemon(t, "--token", testToken)
	c := d.client(t, testToken)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if _, err := c.CreateSession(ctx, wire.CreateSession{Name: "stop-test"}); err != nil {
		t.Fatalf("create: %v", err)
	}
	d.stop(t)
	if code := d.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("limbsd exit code after SIGTERM = %d, want 0\n%s", code, d.stderr.String())
	}
	if _, err := os.Stat(filepath.Join(d.dir, "limbsd.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket file still there after a clean stop: %v", err)
	}
}

func TestLimbsdTokenFromEnvDoesNotLeakIntoShells(t *testing.T) {
	d := startDaemonEnv(t, testToken)
	c := d.client(t, testToken)
	s, err := c.CreateSession(t.Context(), wire.CreateSession{Name: "env"})
	if err != nil {
		t.Fatalf("create with the token from LIMBS_TOKEN: %v", err)
	}
	y := 20.0
	r, err := c.Exec(t.Context(), s.ID, wire.Exec{Command: `echo "${LIMBS_TOKEN:-unset} ${LIMBSD_INIT_CHILD:-unset}"`, YieldAfter: &y})
	if err != nil {
		t.Fatal(err)
	}
	if r.Output != "unset unset\n" {
		t.Errorf("a session sees %q, want the daemon's token and markers unset", r.Output)
	}
}

// A daemon killed with SIGKILL leaves its run directory on /dev/shm; the
// next daemon on the same state directory takes it over (with the
// environment its shells saved when the terminal hung up) instead of
// leaving one more behind, and a clean stop removes it.
func TestLimbsdKill9ReusesRunDir(t *testing.T) {
	if fi, err := os.Stat("/dev/shm"); err != nil || !fi.IsDir() {
		t.Skip("no /dev/shm here: the run directory lives in the state directory")
	}
	d := startDaemon(t, "--token", testToken)
	c := d.client(t, testToken)
	s, err := c.CreateSession(t.Context(), wire.CreateSession{Name: "k9"})
	if err != nil {
		t.Fatal(err)
	}
	y := 20.0
	if _, err := c.Exec(t.Context(), s.ID, wire.Exec{Command: "export LIMBS_K9=kept", YieldAfter: &y}); err != nil {
		t.Fatal(err)
	}
	runDirs := func() []string {
		var out []string
		ents, _ := os.ReadDir("/dev/shm")
		for _, e := range ents {
			if _, err := os.Stat(filepath.Join("/dev/shm", e.Name(), s.ID)); err == nil {
				out = append(out, e.Name())
			}
		}
		return out
	}
	before := runDirs()
	// A failure between the kill and the clean stop would leave it behind.
	t.Cleanup(func() {
		for _, n := range runDirs() {
			os.RemoveAll(filepath.Join("/dev/shm", n))
		}
	})
	if len(before) != 1 {
		t.Fatalf("run directories holding session %s: %v, want one", s.ID, before)
	}
	_ = d.cmd.Process.Kill()
	<-d.exited

	d2 := startDaemonAt(t, d.dir, testToken, "--token", testToken)
	c2 := d2.client(t, testToken)
	r, err := c2.Exec(t.Context(), s.ID, wire.Exec{Command: "echo $LIMBS_K9", YieldAfter: &y})
	if err != nil {
		t.Fatal(err)
	}
	if r.Output != "kept\n" {
		t.Errorf("after kill -9 and a new daemon the session sees %q, want the exported variable", r.Output)
	}
	if after := runDirs(); len(after) != 1 || after[0] != before[0] {
		t.Errorf("run directories after the restart: %v, want the same one as before (%v)", after, before)
	}
	d2.stop(t)
	if left := runDirs(); len(left) != 0 {
		t.Errorf("run directories left after a clean stop: %v", left)
	}
}
