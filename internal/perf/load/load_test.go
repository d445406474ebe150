package load

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/testbin"
)

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

// limbsOrSkip builds limbs and limbsd side by side, and skips (fails with
// LIMBS_REQUIRE_DOCKER=1) without a Docker engine and the base image.
func limbsOrSkip(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("load tests skipped: -short")
	}
	if err := exec.Command("docker", "version").Run(); err != nil {
		testbin.NoDocker(t, "no Docker engine answers (run scripts/docker-up.sh)")
	}
	if err := exec.Command("docker", "image", "inspect", "limbs/base:latest").Run(); err != nil {
		testbin.NoDocker(t, "image limbs/base:latest missing (run scripts/build-base-image.sh)")
	}
	testbin.Path(t, "limbsd", false)
	return testbin.Path(t, "limbs", false)
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func runAndReport(t *testing.T, opts Options) *Report {
	t.Helper()
	opts.Limbs = limbsOrSkip(t)
	opts.Log = logWriter{t}
	rep, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.Print(&b)
	t.Logf("report:\n%s", b.String())
	return rep
}

// checkAccounted is what every run must show: commands ran, none was
// wrong, hung or failed without a typed reason, nothing is left over
// (containers, volumes, socket directories, processes, goroutines).
func checkAccounted(t *testing.T, rep *Report) {
	t.Helper()
	if rep.Commands == 0 {
		t.Errorf("no command ran")
	}
	for _, k := range rep.Kinds {
		if k.Wrong+k.Hung+k.Untyped > 0 {
			t.Errorf("%s: %d wrong, %d hung, %d untyped", k.Kind, k.Wrong, k.Hung, k.Untyped)
		}
		if k.OK+k.Failed+k.Wrong+k.Hung+k.Untyped != k.Count {
			t.Errorf("%s: %d commands, but %d accounted for", k.Kind, k.Count, k.OK+k.Failed+k.Wrong+k.Hung+k.Untyped)
		}
	}
	for _, e := range rep.Examples {
		t.Errorf("error: %s", e)
	}
	for _, l := range rep.Leftovers {
		t.Errorf("left over: %s", l)
	}
	if g := rep.Goroutines; g[0] == 0 || g[1] > g[0]+goroutineSlack {
		t.Errorf("limbs serve goroutines: %d at start, %d after every sandbox was removed", g[0], g[1])
	}
}

// The load: clients over sandboxes, every output its own, no failure.
func TestLoad(t *testing.T) {
	t.Parallel()
	rep := runAndReport(t, Options{Clients: 16, Sandboxes: 4, Duration: 20 * time.Second, Seed: 1})
	checkAccounted(t, rep)
	if rep.Errors != 0 || !rep.Pass {
		t.Errorf("the load has %d errors: %v", rep.Errors, rep.Problems)
	}
	for _, kind := range []string{KindShort, KindChatty, KindInput, KindFile} {
		found := false
		for _, k := range rep.Kinds {
			found = found || (k.Kind == kind && k.OK > 0)
		}
		if !found {
			t.Errorf("no %s command ran to its end", kind)
		}
	}
}

// The fault run: at least one fault of each kind, every command
// accounted for, each fault seen by limbs, nothing left over.
func TestFaults(t *testing.T) {
	t.Parallel()
	rep := runAndReport(t, Options{Clients: 12, Sandboxes: 3, Duration: 40 * time.Second, Seed: 3, Faults: true, FaultGap: time.Second})
	checkAccounted(t, rep)
	if !rep.Pass {
		t.Errorf("the fault run failed: %v", rep.Problems)
	}
	seen := map[string]bool{}
	for _, f := range rep.Faults {
		seen[f.Kind] = seen[f.Kind] || f.OK
	}
	for _, kind := range FaultKinds("docker") {
		if !seen[kind] {
			t.Errorf("no fault %s was injected and seen", kind)
		}
	}
}

// The soak, short: samples taken, no error, nothing left over. Whether
// the slopes are flat is reported, not asserted: 30 s is mostly warm-up.
func TestSoak(t *testing.T) {
	t.Parallel()
	rep := runAndReport(t, Options{Clients: 8, Sandboxes: 2, Duration: 30 * time.Second, Seed: 2, Sample: 3 * time.Second})
	checkAccounted(t, rep)
	if rep.Errors != 0 {
		t.Errorf("the soak has %d errors", rep.Errors)
	}
	if len(rep.Samples) < 5 || len(rep.Slopes) == 0 {
		t.Errorf("%d samples and %d slopes, want at least 5 and 4", len(rep.Samples), len(rep.Slopes))
	}
	for _, s := range rep.Samples {
		if s.ServeRSSKiB == 0 || s.Limbsds != 2 || s.LimbsdRSSKiB == 0 {
			t.Errorf("a sample lacks serve or a limbsd: %+v", s)
		}
	}
	t.Logf("growth beyond the threshold (reported, not asserted): %v", rep.Growth)
}
