package testbin

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Limbsd is a limbsd that StartLimbsd runs for one test.
type Limbsd struct {
	Dir   string // holds the socket, workspace/ (--workdir) and state/
	Sock  string
	Token string
	PID   int
	Logs  Buffer // its stdout and stderr
}

// StartLimbsd runs cmd/limbsd, as shipped or with the race detector, on a
// Unix socket in a fresh directory, with env added to the test's
// environment, and returns once it answers GET /v1/health. It is stopped
// with SIGTERM when the test ends; its output is logged if the test failed.
// $LIMBS_TEST_LIMBSD names a limbsd built elsewhere (another checkout, to
// compare two builds in the benchmarks) to run instead of the race-free one.
func StartLimbsd(t testing.TB, race bool, env ...string) *Limbsd {
	t.Helper()
	bin := os.Getenv("LIMBS_TEST_LIMBSD")
	if bin == "" || race {
		bin = Path(t, "limbsd", race)
	}
	// Not t.TempDir: a Unix socket path has room for ~108 bytes, and test
	// names make those long.
	dir, err := os.MkdirTemp("", "limbsd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := &Limbsd{Dir: dir, Sock: filepath.Join(dir, "limbsd.sock"), Token: "test-token"}
	cmd := exec.Command(bin, "--listen", "unix://"+d.Sock, "--token", d.Token,
		"--workdir", filepath.Join(dir, "workspace"), "--state-dir", filepath.Join(dir, "state"))
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &d.Logs, &d.Logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting limbsd: %v", err)
	}
	d.PID = cmd.Process.Pid
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-exited
		if t.Failed() {
			t.Logf("limbsd output:\n%s", d.Logs.String())
		}
	})
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var nd net.Dialer
		return nd.DialContext(ctx, "unix", d.Sock)
	}}}
	defer hc.CloseIdleConnections()
	Eventually(t, "limbsd answers on its socket", 30*time.Second, func() bool {
		select {
		case <-exited:
			t.Fatalf("limbsd exited at start:\n%s", d.Logs.String())
		default:
		}
		resp, err := hc.Get("http://limbsd/v1/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return d
}
