package control_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/testbin"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/conformance"
	"github.com/limbs-dev/limbs/internal/control"
	"github.com/limbs-dev/limbs/internal/provider/docker"
	"github.com/limbs-dev/limbs/internal/wire"
)

// dockerOrSkip returns a docker provider on the local engine, keeping its
// sandboxes' directories under the state dir's sandboxes/ as limbs serve
// does, or skips.
func dockerOrSkip(t testing.TB, stateDir string) *docker.Provider {
	t.Helper()
	if testing.Short() {
		t.Skip("docker tests skipped: -short")
	}
	p, err := docker.New(context.Background(), docker.Options{SocketRoot: filepath.Join(stateDir, "sandboxes"), LimbsdPath: limbsdBinary(t)})
	if err != nil {
		testbin.NoDocker(t, "no Docker engine answers (run scripts/docker-up.sh)")
	}
	t.Cleanup(func() { p.Close() })
	if exec.Command("docker", "image", "inspect", docker.DefaultImage).Run() != nil {
		testbin.NoDocker(t, "image "+docker.DefaultImage+" or the docker CLI missing (run scripts/build-base-image.sh)")
	}
	return p
}

// dockerObjects lists the containers and the volumes labelled with a
// control plane instance id.
func dockerObjects(t testing.TB, instance string) (containers, volumes []string) {
	t.Helper()
	list := func(args ...string) []string {
		b, err := exec.Command("docker", args...).Output()
		if err != nil {
			t.Errorf("docker %v: %v", args, err)
		}
		return strings.Fields(string(b))
	}
	filter := "label=limbs.instance=" + instance
	return list("ps", "-aq", "--filter", filter), list("volume", "ls", "-q", "--filter", filter)
}

// dockerLeftovers lists the containers and volumes of an instance.
func dockerLeftovers(t testing.TB, instance string) []string {
	containers, volumes := dockerObjects(t, instance)
	return append(containers, volumes...)
}

// cleanDocker removes, when the test ends however it ends, every container
// and volume of the instance, and reports them as leaks if the test did not
// remove them itself. newDockerPlane does this for its instance.
func cleanDocker(t testing.TB, instance *string) {
	t.Cleanup(func() {
		if *instance == "" {
			return
		}
		containers, volumes := dockerObjects(t, *instance)
		if len(containers)+len(volumes) == 0 {
			return
		}
		if !t.Failed() {
			t.Errorf("left behind by instance %s: %v %v", *instance, containers, volumes)
		}
		if len(containers) > 0 {
			_ = exec.Command("docker", append([]string{"rm", "-f", "-v"}, containers...)...).Run()
		}
		if len(volumes) > 0 {
			_ = exec.Command("docker", append([]string{"volume", "rm", "-f"}, volumes...)...).Run()
		}
	})
}

// newDockerPlane runs a control plane on dir with the docker provider.
// Whatever containers and volumes of its instance remain when the test
// ends are removed, and reported as leaks.
func newDockerPlane(t testing.TB, dir string, dp *docker.Provider, pool map[string]int) *plane {
	t.Helper()
	// Registered first, so that it runs after the plane has closed.
	var instance string
	cleanDocker(t, &instance)
	srv, err := control.New(context.Background(), control.Options{
		StateDir:     dir,
		Token:        e2eToken,
		Providers:    map[string]control.Provider{"docker": dp},
		DefaultImage: docker.DefaultImage,
		Pool:         pool,
	})
	if err != nil {
		t.Fatal(err)
	}
	instance = srv.Instance()
	ts := httptest.NewServer(srv)
	c, err := client.New(ts.URL, e2eToken, "")
	if err != nil {
		t.Fatal(err)
	}
	p := &plane{srv: srv, ts: ts, c: c, dir: dir}
	t.Cleanup(p.close)
	return p
}

// Acceptance 1: through limbs serve with the docker provider, a sandbox is
// created, runs commands whose exit code, cwd and env persist, takes
// interactive input, reads and writes files, and is deleted without leaving
// a container, volume or socket directory.
func TestDockerEndToEnd(t *testing.T) {
	dir := stateDir(t)
	dp := dockerOrSkip(t, dir)
	p := newDockerPlane(t, dir, dp, nil)
	ctx := context.Background()

	sb := p.create(t, wire.CreateSandbox{Name: "e2e", MemoryMB: 512})
	if sb.Provider != "docker" || sb.Status != wire.SandboxRunning {
		t.Fatalf("created %+v", sb)
	}
	c := p.sandboxClient(t, sb.ID)
	s, err := c.CreateSession(ctx, wire.CreateSession{Name: "main"})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		command, output string
		exit            int
		cwd             string
	}{
		{"mkdir -p /workspace/app && cd /workspace/app && export GREETING=hello", "", 0, "/workspace/app"},
		{"echo $GREETING from $(pwd)", "hello from /workspace/app\n", 0, "/workspace/app"},
		{"false", "", 1, "/workspace/app"},
		{"(exit 42)", "", 42, "/workspace/app"},
	}
	for _, st := range steps {
		r := exec1(t, c, s.ID, st.command)
		if r.ExitCode == nil || *r.ExitCode != st.exit || r.Output != st.output || r.Cwd != st.cwd {
			t.Errorf("%q: exit %v output %q cwd %q; want %d %q %q", st.command, r.ExitCode, r.Output, r.Cwd, st.exit, st.output, st.cwd)
		}
	}

	// Interactive input: a prompt, answered.
	yield := 10.0
	r, err := c.Exec(ctx, s.ID, wire.Exec{Command: `read -p "name? " n; echo "hi $n"`, YieldAfter: &yield})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != wire.StatusRunning || !r.WaitingForInput {
		t.Fatalf("read prompt: %+v, want running and waiting for input", r)
	}
	r, err = c.Input(ctx, s.ID, wire.Input{Text: "limbs\n", YieldAfter: &yield})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != wire.StatusExited || !strings.Contains(r.Output, "hi limbs") {
		t.Errorf("after input: %+v", r)
	}

	// Files through the control plane.
	resp, err := c.Do(ctx, http.MethodPut, "/files?path=/workspace/app/note.txt", strings.NewReader("written through serve\n"), "application/octet-stream")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if out := exec1(t, c, s.ID, "cat note.txt").Output; out != "written through serve\n" {
		t.Errorf("file written through the API reads %q in the sandbox", out)
	}
	exec1(t, c, s.ID, "echo from the shell > made.txt")
	resp, err = c.Do(ctx, http.MethodGet, "/files?path=/workspace/app/made.txt", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "from the shell\n" {
		t.Errorf("file made in the shell reads %q through the API", b)
	}

	if err := p.c.JSON(ctx, http.MethodDelete, "/sandboxes/"+sb.ID, nil, nil); err != nil {
		t.Fatal(err)
	}
	if left := dockerLeftovers(t, p.srv.Instance()); len(left) > 0 {
		t.Errorf("containers/volumes left after delete: %v", left)
	}
	if _, err := os.Stat(filepath.Join(dir, "sandboxes", sb.ID)); !os.IsNotExist(err) {
		t.Errorf("socket directory left after delete: %v", err)
	}
}

// The Sessions conformance suite through limbs serve into a Docker sandbox.
func TestDockerConformance(t *testing.T) {
	dir := stateDir(t)
	dp := dockerOrSkip(t, dir)
	p := newDockerPlane(t, dir, dp, nil)
	sb := p.create(t, wire.CreateSandbox{})
	t.Run("suite", func(t *testing.T) { conformance.Run(t, p.sandboxClient(t, sb.ID)) })
	if err := p.c.JSON(context.Background(), http.MethodDelete, "/sandboxes/"+sb.ID, nil, nil); err != nil {
		t.Fatal(err)
	}
}

// A Docker sandbox whose container is killed from outside is brought back
// by limbs serve, with its session's cwd and exported environment, and says
// what happened in its status.
func TestDockerRecovery(t *testing.T) {
	dir := stateDir(t)
	dp := dockerOrSkip(t, dir)
	p := newDockerPlane(t, dir, dp, nil)
	ctx := context.Background()
	sb := p.create(t, wire.CreateSandbox{})
	c := p.sandboxClient(t, sb.ID)
	if _, err := c.CreateSession(ctx, wire.CreateSession{Name: "main"}); err != nil {
		t.Fatal(err)
	}
	exec1(t, c, "main", "mkdir -p /workspace/deep && cd /workspace/deep && export KEPT=yes")
	waitSessionSaved(t, filepath.Join(dir, "sandboxes", sb.ID, "run", "state"), "/workspace/deep", "KEPT")
	out, err := exec.Command("docker", "kill", "--signal", "KILL", "limbs-"+sb.ID).CombinedOutput()
	if err != nil {
		t.Fatalf("docker kill: %v: %s", err, out)
	}
	testbin.Eventually(t, "sandbox recovered", time.Minute, func() bool {
		got := p.get(t, sb.ID)
		return got.Status == wire.SandboxRunning && got.Reason != ""
	})
	got := p.get(t, sb.ID)
	if !strings.HasPrefix(got.Message, "recovered after "+got.Reason+" at ") {
		t.Errorf("after recovery: reason %q message %q", got.Reason, got.Message)
	}
	r := exec1(t, c, "main", "echo $KEPT; pwd")
	if r.Output != "yes\n/workspace/deep\n" {
		t.Errorf("after recovery the session shows %q, want KEPT=yes and cwd /workspace/deep", r.Output)
	}
	if err := p.c.JSON(ctx, http.MethodDelete, "/sandboxes/"+sb.ID, nil, nil); err != nil {
		t.Fatal(err)
	}
}

// A restarted control plane re-adopts its Docker sandboxes, removes the
// containers labelled with its instance that its registry does not know,
// and never touches another instance's containers.
func TestDockerRestartAdoptsOnlyItsOwn(t *testing.T) {
	dir := stateDir(t)
	dp := dockerOrSkip(t, dir)
	p1 := newDockerPlane(t, dir, dp, nil)
	instance := p1.srv.Instance()
	kept := p1.create(t, wire.CreateSandbox{Name: "kept"})
	p1.close()

	suffix := randomSuffix(t)
	run := func(id, inst string) {
		out, err := exec.Command("docker", "run", "-d", "--name", "limbs-"+id, "--network", "none",
			"--label", "limbs.managed=true", "--label", "limbs.instance="+inst, "--label", "limbs.sandbox="+id,
			docker.DefaultImage, "sleep", "600").CombinedOutput()
		if err != nil {
			t.Fatalf("docker run: %v: %s", err, out)
		}
	}
	orphan, foreign := "sb_orphan"+suffix, "sb_foreign"+suffix
	// The foreign container is this test's to remove, however it ends; the
	// orphan is the control plane's (newDockerPlane reports it if left).
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", "limbs-"+foreign).Run() })
	run(orphan, instance)
	run(foreign, "i_foreign"+suffix)

	p2 := newDockerPlane(t, dir, dp, nil)
	if got := p2.get(t, "kept"); got.ID != kept.ID || got.Status != wire.SandboxRunning {
		t.Fatalf("after the restart: %+v", got)
	}
	c := p2.sandboxClient(t, kept.ID)
	if _, err := c.CreateSession(context.Background(), wire.CreateSession{Name: "main"}); err != nil {
		t.Fatal(err)
	}
	exec1(t, c, "main", "true")
	exists := func(id string) bool { return exec.Command("docker", "inspect", "limbs-"+id).Run() == nil }
	if exists(orphan) {
		t.Errorf("the orphan container of this instance was not removed")
	}
	if !exists(foreign) {
		t.Errorf("another instance's container was removed")
	}
	if err := p2.c.JSON(context.Background(), http.MethodDelete, "/sandboxes/kept", nil, nil); err != nil {
		t.Fatal(err)
	}
}

// randomSuffix keeps this run's container names apart from any other's.
func randomSuffix(t *testing.T) string {
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// dockerSession runs a control plane on dir with the docker provider and
// gives it one sandbox, removed when the test ends, with a session
// "main": the plane, the sandbox's id and its limbsd client.
func dockerSession(t testing.TB, dir string) (*plane, string, *client.Client) {
	t.Helper()
	return dockerSessionPool(t, dir, nil)
}

// dockerSessionPool is dockerSession on a plane with a warm pool.
func dockerSessionPool(t testing.TB, dir string, pool map[string]int) (*plane, string, *client.Client) {
	t.Helper()
	p := newDockerPlane(t, dir, dockerOrSkip(t, dir), pool)
	sbs := p.c.Sandboxes()
	sb, err := sbs.Create(context.Background(), wire.CreateSandbox{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sbs.Remove(context.Background(), sb.ID) })
	c := p.sandboxClient(t, sb.ID)
	if _, err := c.CreateSession(context.Background(), wire.CreateSession{Name: "main"}); err != nil {
		t.Fatal(err)
	}
	return p, sb.ID, c
}
