package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/perf"
	"github.com/limbs-dev/limbs/internal/testbin"
)

// benchBins are the limbs binary (with the race detector, so that the
// bench's own goroutines are checked) and a static limbsd, and a short
// TMPDIR for the run, which must be empty again after it.
func benchBins(t *testing.T) (limbs, limbsd, tmp string) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs limbs bench, which starts limbsd, limbs serve and Docker sandboxes")
	}
	tmp, err := os.MkdirTemp("", "lbt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	return testbin.Path(t, "limbs", true), testbin.Path(t, "limbsd", false), tmp
}

func haveDocker() bool {
	return exec.Command("docker", "image", "inspect", "limbs/base:latest").Run() == nil
}

// tinyCounts keep a run of the command to seconds: this tests the
// command, not the machine.
var tinyCounts = []string{"--rounds", "5", "--mcp-rounds", "2", "--exec-rounds", "1", "--poll-rounds", "1",
	"--mib", "1", "--throughput-runs", "1", "--sessions", "2", "--creates", "1", "--concurrent", "2",
	"--idle-sessions", "1", "--idle-sandboxes", "1", "--events", "500", "--follow-rounds", "2"}

func runBenchCmd(t *testing.T, limbs, limbsd, tmp string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(limbs, append(append([]string{"bench", "--limbsd", limbsd}, tinyCounts...), args...)...)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		_ = cmd.Process.Signal(os.Interrupt)
		<-done
		t.Fatalf("limbs bench %q did not end within 5 minutes:\n%s\n%s", args, o.String(), e.String())
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

// leftovers fails the test if the run left anything in its TMPDIR (state
// directories, sockets, tmux's) or a container whose socket directory is
// there.
func leftovers(t *testing.T, tmp string) {
	t.Helper()
	if ents, _ := os.ReadDir(tmp); len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("limbs bench left %v in its TMPDIR %s", names, tmp)
	}
	if !haveDocker() {
		return
	}
	out, err := exec.Command("docker", "ps", "-a", "--filter", "label=limbs.managed=true", "--format", `{{.Names}} {{.Label "limbs.socket-dir"}}`).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, ln := range strings.Split(string(out), "\n") {
		if strings.Contains(ln, " "+tmp+"/") {
			t.Errorf("limbs bench left the container %s", ln)
		}
	}
}

// TestBenchTable runs `limbs bench` with tiny counts over a few groups:
// the table has its header, rows and targets, the JSON parses with the
// figures asked for, --compare puts a second run next to it, and nothing
// is left behind.
func TestBenchTable(t *testing.T) {
	limbs, limbsd, tmp := benchBins(t)
	docker := haveDocker()
	if !docker {
		t.Log("no Docker engine or limbs/base image: the Docker rows are left out")
	}
	report := t.TempDir() + "/old.json"
	out, errs, code := runBenchCmd(t, limbs, limbsd, tmp, "--only", "roundtrip,throughput,density,events", "--json", report)
	if code != 0 {
		t.Fatalf("limbs bench exited %d:\n%s\n%s", code, out, errs)
	}
	for _, want := range []string{"limbs bench: ", "cores", "p50", "p99", "[roundtrip]", "raw PTY ping-pong", "[throughput]", "[density]", "limbsd RSS, idle", "[events]", "targets (from this run):", "limbsd RSS per extra idle session"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	rep, err := perf.ReadReport(report)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Machine.Cores < 1 || rep.Machine.Kernel == "" || (docker && rep.Machine.Docker == "") {
		t.Errorf("machine %+v: want cores, kernel and (with Docker) the engine's version", rep.Machine)
	}
	wantRows := map[string]int{"roundtrip/raw-pty": 5, "roundtrip/limbsd-api/true": 5, "roundtrip/limbsd-api/echo-hi": 5, "throughput/limbsd-api/1": 1, "throughput/raw-pty/2": 1, "density/limbsd-idle": 1, "events/ingest/100": 1}
	if docker {
		for k, n := range map[string]int{"roundtrip/serve-docker/true": 5, "roundtrip/mcp/echo-hi": 2, "roundtrip/docker-exec/true": 1, "roundtrip/tmux/true": 1, "roundtrip/silence/echo-hi": 1, "density/sandbox-host": 1, "events/follow/serve": 4} {
			wantRows[k] = n
		}
	}
	for k, n := range wantRows {
		r, ok := rep.Row(k)
		if !ok || r.N != n || r.P50 <= 0 || r.Min > r.P50 || r.P50 > r.Max {
			t.Errorf("row %s = %+v (found %v); want %d samples, 0 < min <= p50 <= max", k, r, ok, n)
		}
	}
	if r, _ := rep.Row("roundtrip/limbsd-api/true"); r.Baseline != "roundtrip/raw-pty" || r.Ratio <= 0 {
		t.Errorf("the limbsd API row's baseline %q ratio %v: want the raw PTY and a ratio", r.Baseline, r.Ratio)
	}
	if len(rep.Targets) == 0 {
		t.Error("the report has no targets")
	}
	leftovers(t, tmp)

	out, errs, code = runBenchCmd(t, limbs, limbsd, tmp, "--only", "throughput", "--compare", report)
	if code != 0 {
		t.Fatalf("limbs bench --compare exited %d:\n%s\n%s", code, out, errs)
	}
	for _, want := range []string{"old p50", "new p50", "new/old", "limbs exec via limbsd's API, 1 session", "only in old: raw PTY ping-pong"} {
		if !strings.Contains(out, want) {
			t.Errorf("the comparison lacks %q:\n%s", want, out)
		}
	}
	leftovers(t, tmp)

	_, errs, code = runBenchCmd(t, limbs, limbsd, tmp, "--only", "nosuch")
	if code != 2 || !strings.Contains(errs, "the groups are roundtrip") {
		t.Errorf("--only nosuch: exit %d, %q; want 2 and the list of groups", code, errs)
	}
}

// TestBenchInterrupt: Ctrl-C in the middle of the creates stops the run,
// which removes what it started (containers, limbs serve, its state)
// before it exits 130.
func TestBenchInterrupt(t *testing.T) {
	limbs, limbsd, tmp := benchBins(t)
	if !haveDocker() {
		testbin.NoDocker(t, "no Docker engine or no limbs/base:latest image")
	}
	cmd := exec.Command(limbs, "bench", "--limbsd", limbsd, "--only", "create", "--creates", "50")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var o testbin.Buffer
	cmd.Stdout, cmd.Stderr = &o, &o
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	testbin.Eventually(t, "limbs bench to start its cold creates", 3*time.Minute, func() bool {
		return strings.Contains(o.String(), "create: cold creates")
	})
	time.Sleep(3 * time.Second) // a create or two in flight
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("limbs bench did not end within 3 minutes of Ctrl-C:\n%s", o.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 130 || !strings.Contains(o.String(), "interrupted") {
		t.Errorf("after Ctrl-C limbs bench exited %d; want 130 and a word that it was interrupted:\n%s", code, o.String())
	}
	leftovers(t, tmp)
}
