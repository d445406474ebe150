package control_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/provider/local"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// A sandbox whose agent is root in its container (User 0:0) can change
// what is in /run/limbs, the host's socket directory. These tests play
// that agent with docker exec -u 0, and check that the host follows
// nothing it finds there.

// dockerRoot runs a shell command as root in sandbox id's container.
func dockerRoot(t *testing.T, id, script string) string {
	t.Helper()
	out, err := exec.Command("docker", "exec", "-u", "0", "limbs-"+id, "sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("docker exec %q: %v: %s", script, err, out)
	}
	return string(out)
}

// hostDir is a host directory a hostile sandbox would like to own: it
// belongs to another user with a mode of its own, and is empty.
func hostDir(t *testing.T) (string, os.FileInfo) {
	t.Helper()
	d := filepath.Join(t.TempDir(), "victim")
	if err := os.Mkdir(d, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, 4242, 4242); err != nil {
		t.Skipf("cannot give %s to uid 4242 (not root?): %v", d, err)
	}
	fi, err := os.Stat(d)
	if err != nil {
		t.Fatal(err)
	}
	return d, fi
}

// checkUntouched fails unless d has its owner, mode and (no) content.
func checkUntouched(t *testing.T, d string, was os.FileInfo) {
	t.Helper()
	fi, err := os.Stat(d)
	if err != nil {
		t.Fatal(err)
	}
	st, st0 := fi.Sys().(*syscall.Stat_t), was.Sys().(*syscall.Stat_t)
	if st.Uid != st0.Uid || st.Gid != st0.Gid || fi.Mode() != was.Mode() {
		t.Errorf("host directory %s changed: owner %d:%d mode %v, was %d:%d %v", d, st.Uid, st.Gid, fi.Mode(), st0.Uid, st0.Gid, was.Mode())
	}
	if ents, _ := os.ReadDir(d); len(ents) > 0 {
		t.Errorf("host directory %s got %d entries, want none (first %q)", d, len(ents), ents[0].Name())
	}
}

// Defect 1: the agent replaces limbsd's state directory with a link to a
// host directory and kills limbsd; the recovery must neither chown nor
// create anything there, and the sandbox ends failed, naming the link.
func TestDockerStateLinkNotFollowed(t *testing.T) {
	dir := stateDir(t)
	dp := dockerOrSkip(t, dir)
	p := newDockerPlane(t, dir, dp, nil)
	sb := p.create(t, wire.CreateSandbox{User: "0:0"})
	victim, was := hostDir(t)
	dockerRoot(t, sb.ID, "mv /run/limbs/state /run/limbs/state.real && ln -s "+victim+" /run/limbs/state && kill -9 $(pgrep -o -x limbsd)")
	testbin.Eventually(t, "sandbox reported failed with the reason", time.Minute, func() bool {
		got := p.get(t, sb.ID)
		return got.Status == wire.SandboxFailed && strings.Contains(got.Message, "symbolic link")
	})
	got := p.get(t, sb.ID)
	t.Logf("status %s (%s): %s", got.Status, got.Reason, got.Message)
	if !strings.Contains(got.Message, victim) {
		t.Errorf("message %q does not name the link's target %s", got.Message, victim)
	}
	checkUntouched(t, victim, was)
	if err := p.c.JSON(context.Background(), http.MethodDelete, "/sandboxes/"+sb.ID, nil, nil); err != nil {
		t.Fatal(err)
	}
	checkUntouched(t, victim, was)
}

// recorder is a host server on a Unix socket that remembers every request
// it gets, with its Authorization header.
type recorder struct {
	path string
	mu   sync.Mutex
	got  []string
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	r := &recorder{path: filepath.Join(t.TempDir(), "host.sock")}
	ln, err := net.Listen("unix", r.path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.got = append(r.got, req.Method+" "+req.URL.Path+" auth="+req.Header.Get("Authorization"))
		r.mu.Unlock()
		w.Write([]byte(`{}`))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return r
}

func (r *recorder) requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// Defect 2: limbsd's socket replaced by a link to a host socket, and by a
// listener of the agent's on the same path: no request reaches either,
// the token is never sent, and the API answers 503 with the reason.
func TestDockerSocketImpostorRefused(t *testing.T) {
	dir := stateDir(t)
	dp := dockerOrSkip(t, dir)
	p := newDockerPlane(t, dir, dp, nil)
	ctx := context.Background()

	create := func(t *testing.T) wire.Sandbox {
		sb := p.create(t, wire.CreateSandbox{User: "0:0"})
		t.Cleanup(func() {
			if err := p.c.JSON(ctx, http.MethodDelete, "/sandboxes/"+sb.ID, nil, nil); err != nil {
				t.Errorf("removing the sandbox: %v", err)
			}
		})
		return sb
	}
	expect503 := func(t *testing.T, id string) {
		t.Helper()
		c := p.sandboxClient(t, id)
		_, err := c.ListSessions(ctx)
		if !errors.Is(err, wire.ErrUnavailable) {
			t.Fatalf("GET sessions through an impostor socket: %v, want a 503", err)
		}
		if !strings.Contains(err.Error(), "not the sandbox's daemon") {
			t.Errorf("503 without the reason: %v", err)
		}
		t.Logf("answer: %v", err)
	}

	t.Run("link to a host socket", func(t *testing.T) {
		sb := create(t)
		rec := newRecorder(t)
		dockerRoot(t, sb.ID, "ln -sf "+rec.path+" /run/limbs/limbsd.sock")
		expect503(t, sb.ID)
		if got := rec.requests(); len(got) > 0 {
			t.Errorf("the host socket got %d requests: %q", len(got), got)
		}
	})
	t.Run("host socket in its place", func(t *testing.T) {
		// What a link swapped in between the host's check and its connect
		// reaches: a socket that is a socket, answered by a host process.
		sb := create(t)
		rec := newRecorder(t)
		sock := filepath.Join(dir, "sandboxes", sb.ID, "run", "limbsd.sock")
		if err := os.Remove(sock); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(rec.path, sock); err != nil {
			t.Skipf("cannot link the host socket into the socket dir: %v", err)
		}
		expect503(t, sb.ID)
		if got := rec.requests(); len(got) > 0 {
			t.Errorf("the host socket got %d requests: %q", len(got), got)
		}
	})
	t.Run("listener of the agent's", func(t *testing.T) {
		sb := create(t)
		// A fake limbsd answering 200 to everything and keeping what it
		// was sent.
		fake := `import os, socket
p = "/run/limbs/limbsd.sock"
os.unlink(p)
s = socket.socket(socket.AF_UNIX)
s.bind(p)
s.listen(8)
open("/tmp/fake-ready", "w").close()
while True:
    c, _ = s.accept()
    d = c.recv(65536)
    with open("/tmp/fake-got", "ab") as f:
        f.write(d)
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]")
    c.close()
`
		if out, err := exec.Command("docker", "exec", "-d", "-u", "0", "limbs-"+sb.ID, "python3", "-c", fake).CombinedOutput(); err != nil {
			t.Fatalf("starting the fake: %v: %s", err, out)
		}
		testbin.Eventually(t, "fake limbsd listening", 30*time.Second, func() bool {
			return exec.Command("docker", "exec", "limbs-"+sb.ID, "test", "-e", "/tmp/fake-ready").Run() == nil
		})
		expect503(t, sb.ID)
		if out, _ := exec.Command("docker", "exec", "limbs-"+sb.ID, "cat", "/tmp/fake-got").CombinedOutput(); strings.Contains(string(out), "GET") {
			t.Errorf("the fake limbsd got a request: %q", out)
		}
	})
}

// The local provider's sandbox can write its state and socket
// directories (bound in by bubblewrap, or plainly the host user's): a
// listener of its own on limbsd's socket path is refused, and a link in
// place of its state directory is never followed by the recovery.
func TestLocalTamperRefused(t *testing.T) {
	dir := stateDir(t)
	removeAll(t, dir)
	p := newPlane(t, dir, local.IsolateAuto, nil)
	ctx := context.Background()

	t.Run("listener of the sandbox's", func(t *testing.T) {
		sb := p.create(t, wire.CreateSandbox{Provider: "local"})
		c := p.sandboxClient(t, sb.ID)
		if _, err := c.CreateSession(ctx, wire.CreateSession{Name: "main"}); err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(dir, "sandboxes", sb.ID, "run", "limbsd.sock")
		got := filepath.Join(dir, "sandboxes", sb.ID, "workspace", "got")
		// The python fake outlives the command (setsid, in the background)
		// and replaces limbsd's socket.
		fake := `import os, socket, sys
p, got = sys.argv[1], sys.argv[2]
os.unlink(p)
s = socket.socket(socket.AF_UNIX)
s.bind(p)
s.listen(8)
open(got + ".ready", "w").close()
while True:
    c, _ = s.accept()
    d = c.recv(65536)
    with open(got, "ab") as f:
        f.write(d)
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]")
    c.close()
`
		enc := base64.StdEncoding.EncodeToString([]byte(fake))
		r := exec1(t, c, "main", "echo "+enc+" | base64 -d > fake.py && (setsid python3 fake.py "+sock+" "+got+" </dev/null >/dev/null 2>&1 &); for i in $(seq 50); do test -e "+got+".ready && break; sleep 0.1; done; test -e "+got+".ready && echo listening")
		if !strings.Contains(r.Output, "listening") {
			t.Fatalf("could not start the fake in the sandbox: %+v", r)
		}
		// The control plane's kept-alive connection to the real limbsd
		// still works; a new one (a second session list at once) must not
		// reach the fake.
		c2 := p.sandboxClient(t, sb.ID)
		c2.HTTPClient().CloseIdleConnections()
		done := make(chan error, 1)
		go func() {
			_, err := c.Exec(ctx, "main", wire.Exec{Command: "sleep 2", Timeout: 10})
			done <- err
		}()
		time.Sleep(300 * time.Millisecond)
		_, err := c2.ListSessions(ctx)
		<-done
		if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "not the sandbox's daemon") {
			t.Errorf("GET sessions with the sandbox's own listener on the socket: %v, want a 503 naming the impostor", err)
		}
		if b, _ := os.ReadFile(got); len(b) > 0 {
			t.Errorf("the sandbox's listener got a request: %q", b)
		}
	})
	t.Run("state link", func(t *testing.T) {
		sb := p.create(t, wire.CreateSandbox{Provider: "local"})
		victim, was := hostDir(t)
		state := filepath.Join(dir, "sandboxes", sb.ID, "state")
		if err := os.Rename(state, state+".real"); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(victim, state); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(-p.pidOf(t, sb.ID), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		testbin.Eventually(t, "sandbox reported failed with the reason", time.Minute, func() bool {
			got := p.get(t, sb.ID)
			return got.Status == wire.SandboxFailed && strings.Contains(got.Message, "symbolic link")
		})
		t.Logf("message: %s", p.get(t, sb.ID).Message)
		checkUntouched(t, victim, was)
	})
}
