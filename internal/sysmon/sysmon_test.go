package sysmon

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPlan(t *testing.T) {
	base := []string{"PATH=/bin", "HOME=/h"}
	for _, tc := range []struct {
		name string
		env  []string
		up   time.Duration
		want []string // nil: the process goes on as it is
	}{
		{"no GODEBUG", base, time.Hour,
			[]string{"PATH=/bin", "HOME=/h", "GODEBUG=" + setting, origEnv + "=unset"}},
		{"empty GODEBUG", append(base, "GODEBUG="), time.Hour,
			[]string{"PATH=/bin", "HOME=/h", "GODEBUG=" + setting, origEnv + "=="}},
		{"the operator's GODEBUG is kept, after ours", append(base, "GODEBUG=http2debug=1,panicnil=1"), time.Hour,
			[]string{"PATH=/bin", "HOME=/h", "GODEBUG=" + setting + ",http2debug=1,panicnil=1", origEnv + "==http2debug=1,panicnil=1"}},
		{"a stale carrier is dropped", append(base, origEnv+"=unset"), time.Hour,
			[]string{"PATH=/bin", "HOME=/h", "GODEBUG=" + setting, origEnv + "=unset"}},
		{"schedtrace=0 turns it off", append(base, "GODEBUG=schedtrace=0"), time.Hour, nil},
		{"the operator's schedtrace wins", append(base, "GODEBUG=gctrace=1,schedtrace=1000"), time.Hour, nil},
		{"a schedtrace the runtime ignores too", append(base, "GODEBUG= schedtrace=1000"), time.Hour,
			[]string{"PATH=/bin", "HOME=/h", "GODEBUG=" + setting + ", schedtrace=1000", origEnv + "== schedtrace=1000"}},
		{"a host up past the mark", base, maxUptime, nil},
		{"no clock", base, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := plan(tc.env, tc.up)
			if ok != (tc.want != nil) {
				t.Fatalf("plan: ok %v, want %v", ok, tc.want != nil)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

// helperEnv makes the test binary, run again by TestAwake, the process
// under test: it calls awake, which starts it once more.
const helperEnv = "LIMBS_SYSMON_TEST_HELPER"

// TestHelperAwake is the process under test of TestAwake, not a test.
func TestHelperAwake(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("run by TestAwake")
	}
	if mode == "awake" {
		Awake()
	}
	environ, _ := os.ReadFile("/proc/self/environ")
	child, err := exec.Command("sh", "-c", `printf '%s|%s' "${GODEBUG-unset}" "${`+origEnv+`-unset}"`).Output()
	if err != nil {
		t.Fatal(err)
	}
	// The runtime's own wake-ups while the process does nothing.
	before := switches(t)
	time.Sleep(time.Second)
	fmt.Printf("pid=%d\nstarted-with-setting=%v\nawakened=%v\nchild=%s\nidle-switches=%d\n",
		os.Getpid(), strings.Contains(string(environ), "GODEBUG="+setting), Awakened(), child, switches(t)-before)
}

func switches(t *testing.T) int {
	t.Helper()
	paths, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // a thread that ended
		}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
				k, _ := strconv.Atoi(strings.TrimSpace(v))
				n += k
			}
		}
	}
	return n
}

// TestAwake starts a real process that calls awake: it is started again
// in the same process with the setting, its children see the GODEBUG it
// was started with (and no trace of the carrier), and the runtime keeps
// waking while the process is idle, which it does not without it.
func TestAwake(t *testing.T) {
	if uptime() >= maxUptime {
		t.Skip("this host has been up past the runtime's schedtrace mark: awake leaves the process as it is (TestPlan)")
	}
	run := func(mode, godebug string, extra ...string) (pid int, out map[string]string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperAwake$", "-test.count=1")
		// Whatever GODEBUG or carrier go test itself runs with stays out.
		for _, kv := range os.Environ() {
			if k, _, _ := strings.Cut(kv, "="); k != "GODEBUG" && k != origEnv {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, helperEnv+"="+mode)
		if godebug != "" {
			cmd.Env = append(cmd.Env, "GODEBUG="+godebug)
		}
		cmd.Env = append(cmd.Env, extra...)
		var stdout strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("helper (%s): %v\n%s", mode, err, stdout.String())
		}
		out = map[string]string{}
		for line := range strings.Lines(stdout.String()) {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
				out[k] = v
			}
		}
		return cmd.Process.Pid, out
	}
	for _, tc := range []struct {
		godebug string
		extra   []string
	}{
		{"", nil},
		{"http2debug=0", nil},
		// A carrier copied from another process's environ: ignored, and
		// not seen by the children either.
		{"http2debug=0", []string{origEnv + "==gctrace=1"}},
	} {
		godebug := tc.godebug
		pid, out := run("awake", godebug, tc.extra...)
		if out["pid"] != strconv.Itoa(pid) {
			t.Errorf("GODEBUG=%q: the new start ran as pid %s, want the same process, %d", godebug, out["pid"], pid)
		}
		if out["awakened"] != "true" {
			t.Errorf("GODEBUG=%q: Awakened() is %s in the new start", godebug, out["awakened"])
		}
		if out["started-with-setting"] != "true" {
			t.Errorf("GODEBUG=%q: the new start's environment lacks GODEBUG=%s", godebug, setting)
		}
		want := "unset|unset"
		if godebug != "" {
			want = godebug + "|unset"
		}
		if out["child"] != want {
			t.Errorf("GODEBUG=%q: a child sees GODEBUG|%s = %q, want %q", godebug, origEnv, out["child"], want)
		}
		awakeN, _ := strconv.Atoi(out["idle-switches"])
		if raceEnabled {
			// The race runtime's own wake-ups keep even a plain process
			// busy: here only the awake one's count is checked; `make
			// test` runs this package without -race too.
			if awakeN < 50 {
				t.Errorf("GODEBUG=%q: %d context switches in an idle second awake: the runtime does not keep sysmon awake", godebug, awakeN)
			}
			continue
		}
		_, plain := run("plain", godebug)
		plainN, _ := strconv.Atoi(plain["idle-switches"])
		// Awake: sysmon polls every 20 µs for a while, then every 10 ms,
		// some 100 wake-ups in the second; asleep: a few at most.
		if awakeN < 50 || awakeN < plainN+40 {
			t.Errorf("GODEBUG=%q: %d context switches in an idle second awake, %d without: the runtime does not keep sysmon awake", godebug, awakeN, plainN)
		}
	}
}
