package docker

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// inContainer lists the processes of the host whose cgroup is the
// container's and whose command name is comm. It reads the host's /proc:
// a docker exec cannot start while the sandbox is at its pids limit.
func inContainer(containerID, comm string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if c, err := os.ReadFile("/proc/" + e.Name() + "/comm"); err != nil || strings.TrimSpace(string(c)) != comm {
			continue
		}
		if cg, err := os.ReadFile("/proc/" + e.Name() + "/cgroup"); err == nil && strings.Contains(string(cg), containerID) {
			if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
				if i := strings.LastIndexByte(string(st), ')'); i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
					continue
				}
			}
			out = append(out, pid)
		}
	}
	return out
}

// TestForkBombEndedByRestart: a fork bomb is ended by restarting its session,
// without stopping the sandbox, and does not come back. Each bomb runs as a
// background job while a foreground command holds the terminal: "churn"
// fills the sandbox's pids limit, each process forking again at once while
// half the children exit and are reaped (a kill makes room for a new
// child); in "hop" four chains fork and exit at once (no pid lives long
// enough to be signalled by number).
func TestForkBombEndedByRestart(t *testing.T) {
	for _, bomb := range []struct {
		name, cmd, comm string
		fill, keep      int // processes named comm: at least fill before, at most keep after
	}{
		{"churn", `nice -n 19 perl -e 'while (1) { my $p = fork; if (defined $p && $p == 0) { exit 0 if rand() < 0.5; next } 1 while waitpid(-1, 1) > 0 }' & sleep 1000`, "perl", 300, 0},
		{"hop", `nice -n 19 perl -e 'fork for 1..2; while (1) { exit 0 if fork }' & sleep 1000`, "perl", 1, 0},
		// The classic, typed at the prompt; the new shell is the one bash
		// left.
		{"bash", `b() { b | b & }; b; sleep 1000`, "bash", 200, 1},
	} {
		t.Run(bomb.name, func(t *testing.T) {
			p := newProvider(t)
			ctx := t.Context()
			b := newBox(t, p, nil)
			s, err := b.lc.CreateSession(ctx, wire.CreateSession{})
			if err != nil {
				t.Fatal(err)
			}
			yield := 1.0
			r, err := b.lc.Exec(ctx, s.ID, wire.Exec{Command: bomb.cmd, YieldAfter: &yield})
			if err != nil {
				t.Fatalf("fork bomb: %v", err)
			}
			if r.Status != wire.StatusRunning {
				t.Fatalf("the bomb's command is %q, want it running: %q", r.Status, r.Output)
			}
			id := b.inst.ProviderID
			testbin.Eventually(t, "the fork bomb runs", 60*time.Second, func() bool {
				return len(inContainer(id, bomb.comm)) >= bomb.fill
			})
			start := time.Now()
			if _, err := b.lc.Restart(ctx, s.ID); err != nil {
				t.Fatalf("restart: %v", err)
			}
			t.Logf("restart took %s", time.Since(start))
			if left := inContainer(id, bomb.comm); len(left) > bomb.keep {
				t.Errorf("%d processes of the fork bomb survived restart", len(left)-bomb.keep)
			}
			zero := 0.0
			r, err = b.lc.Exec(ctx, s.ID, wire.Exec{Command: "sleep 1; echo alive", Timeout: 30, YieldAfter: &zero})
			if err != nil || r.Output != "alive\n" {
				t.Errorf("the new shell answered %q, %v; want alive", r.Output, err)
			}
			if left := inContainer(id, bomb.comm); len(left) > bomb.keep {
				t.Errorf("the fork bomb came back after restart: %d processes", len(left)-bomb.keep)
			}
		})
	}
}
