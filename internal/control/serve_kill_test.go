package control_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/testbin"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/store"
	"github.com/limbs-dev/limbs/internal/wire"
)

// limbsBinary is cmd/limbs, built next to the tests' limbsd, where limbs
// serve finds it.
func limbsBinary(t testing.TB) string {
	limbsdBinary(t)
	return testbin.Path(t, "limbs", false)
}

// serveProcess is `limbs serve` as a real child process.
type serveProcess struct {
	cmd    *exec.Cmd
	exited chan struct{}
	log    *testbin.Buffer
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func startServe(t *testing.T, addr string, args ...string) *serveProcess {
	t.Helper()
	sp := &serveProcess{exited: make(chan struct{}), log: &testbin.Buffer{}}
	sp.cmd = exec.Command(limbsBinary(t), append([]string{"serve", "--listen", addr, "--token", e2eToken}, args...)...)
	sp.cmd.Stdout = sp.log
	sp.cmd.Stderr = sp.log
	if err := sp.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { sp.cmd.Wait(); close(sp.exited) }()
	t.Cleanup(func() {
		sp.kill()
		if t.Failed() {
			t.Logf("limbs serve (pid %d) log:\n%s", sp.cmd.Process.Pid, sp.log.String())
		}
	})
	c, _ := client.New(addr, e2eToken, "")
	testbin.Eventually(t, "limbs serve answers", time.Minute, func() bool {
		select {
		case <-sp.exited:
			t.Fatalf("limbs serve exited at start:\n%s", sp.log.String())
		default:
		}
		_, err := c.Health(context.Background())
		return err == nil
	})
	return sp
}

func (sp *serveProcess) kill() {
	select {
	case <-sp.exited:
	default:
		_ = sp.cmd.Process.Signal(syscall.SIGKILL)
		<-sp.exited
	}
}

// Acceptance 4: `kill -9` of limbs serve while a command runs, then a
// restart: the sandbox is re-adopted, the command's output is still
// retrievable, and nothing leaks.
func TestServeKill9(t *testing.T) {
	for _, provider := range []string{"local", "docker"} {
		t.Run(provider, func(t *testing.T) {
			var instance string
			if provider == "docker" {
				dockerOrSkip(t, "")
				cleanDocker(t, &instance)
			}
			dir := stateDir(t)
			removeAll(t, dir)
			addr := freeAddr(t)
			args := []string{"--state-dir", dir, "--provider", provider}
			sp := startServe(t, addr, args...)
			ctl, _ := client.New(addr, e2eToken, "")
			ctx := context.Background()

			var sb wire.Sandbox
			if err := ctl.JSON(ctx, http.MethodPost, "/sandboxes", wire.CreateSandbox{Name: "k9"}, &sb); err != nil {
				t.Fatal(err)
			}
			c, _ := client.New(addr, e2eToken, "/sandboxes/k9")
			if _, err := c.CreateSession(ctx, wire.CreateSession{Name: "main"}); err != nil {
				t.Fatal(err)
			}
			// Lines come one by one, so that the kill lands mid-command.
			yield := 0.5
			first, err := c.Exec(ctx, "main", wire.Exec{
				Command:    "for i in $(seq 1 8); do echo line$i; sleep 0.25; done",
				YieldAfter: &yield,
			})
			if err != nil {
				t.Fatal(err)
			}
			if first.Status != wire.StatusRunning {
				t.Fatalf("the command ended before the kill: %+v", first)
			}

			sp.kill()
			db, err := store.Open(filepath.Join(dir, "limbs.db"))
			if err != nil {
				t.Fatal(err)
			}
			instance = db.Instance()
			db.Close()

			startServe(t, addr, args...)
			var got wire.Sandbox
			if err := ctl.JSON(ctx, http.MethodGet, "/sandboxes/k9", nil, &got); err != nil {
				t.Fatal(err)
			}
			if got.ID != sb.ID || got.Status != wire.SandboxRunning {
				t.Fatalf("after the restart: %+v", got)
			}
			output := first.Output
			wyield := 30.0
			for r := first; r.Status == wire.StatusRunning; {
				if r, err = c.Wait(ctx, "main", wire.Wait{YieldAfter: &wyield}); err != nil {
					t.Fatalf("wait after the restart: %v", err)
				}
				output += r.Output
			}
			var want strings.Builder
			for i := 1; i <= 8; i++ {
				want.WriteString("line" + string(rune('0'+i)) + "\n")
			}
			if output != want.String() {
				t.Errorf("the command's output across the kill is %q, want %q", output, want.String())
			}
			// The whole stream is readable too.
			rc, err := c.Output(ctx, "main", first.OffsetStart, -1)
			if err != nil {
				t.Fatal(err)
			}
			raw := new(strings.Builder)
			_, _ = io.Copy(raw, rc)
			rc.Close()
			if !strings.Contains(raw.String(), "line8") {
				t.Errorf("raw output after the restart lacks line8: %q", raw.String())
			}

			if err := ctl.JSON(ctx, http.MethodDelete, "/sandboxes/k9", nil, nil); err != nil {
				t.Fatal(err)
			}
			if entries, _ := os.ReadDir(filepath.Join(dir, "sandboxes")); len(entries) != 0 {
				t.Errorf("left in the state dir: %v", entries)
			}
			if provider == "docker" {
				if left := dockerLeftovers(t, instance); len(left) > 0 {
					t.Errorf("containers/volumes left: %v", left)
				}
			}
		})
	}
}
