package docker

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Acceptance 3: hostile workloads leave the host and the provider healthy
// and the sandbox reporting the right reason.

// leaveState puts a session named "main" in a cwd with an exported variable,
// for checkState to find again after limbsd came back.
func leaveState(t *testing.T, b *box) {
	t.Helper()
	ctx := t.Context()
	s, err := b.lc.CreateSession(ctx, wire.CreateSession{Name: "main"})
	if err != nil {
		t.Fatal(err)
	}
	zero := 0.0
	r, err := b.lc.Exec(ctx, s.ID, wire.Exec{Command: "mkdir -p /workspace/deep && cd /workspace/deep && export KEPT=yes", Timeout: 30, YieldAfter: &zero})
	if err != nil || exitCode(r) != 0 {
		t.Fatalf("preparing the session: %+v, %v", r, err)
	}
	// The shell saves its exported environment into limbsd's state dir just
	// after it reports a command's end, by rewriting a file in place: a
	// kill at that very moment would lose it (a limbsd matter, not the
	// provider's). Wait until the save is on the host's side of the state
	// dir, which is what this test is about.
	envs := filepath.Join(b.dir, "state", "sessions", s.ID, "env")
	for i := 0; ; i++ {
		if b, err := os.ReadFile(envs); err == nil && strings.Contains(string(b), "KEPT=") {
			return
		}
		if i == 500 {
			t.Fatalf("the session's environment never reached %s", envs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkState: the session limbsd restored from its state dir is back in
// its cwd with its exported environment.
func checkState(t *testing.T, b *box) {
	t.Helper()
	ctx := t.Context()
	zero := 0.0
	r, err := b.lc.Exec(ctx, "main", wire.Exec{Command: `echo "$PWD $KEPT"`, Timeout: 30, YieldAfter: &zero})
	if err != nil {
		t.Fatalf("session main after recovery: %v", err)
	}
	got := strings.TrimSpace(r.Output)
	if !strings.HasPrefix(got, "/workspace/deep") {
		t.Errorf("session main after recovery: %q, want its cwd /workspace/deep", got)
	}
	if !strings.HasSuffix(got, " yes") {
		// Seen when bash's EXIT trap, run as the PTY closes, truncates the
		// env file (export -p >| env) and is killed mid-write by the
		// container's teardown: the save must be atomic (temp + rename).
		t.Errorf("session main after recovery: %q, want its exported variable KEPT=yes back", got)
	}
}

// TestKillLimbsd: kill -9 of limbsd (by container root: the agent user
// cannot, see TestAgentCannotTouchLimbsd) is reported as daemon_exited,
// and Start brings the sandbox back with its sessions.
func TestKillLimbsd(t *testing.T) {
	p := newProvider(t)
	ctx := t.Context()
	b := newBox(t, p, nil)
	leaveState(t, b)
	evs, err := p.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out, code := dockerExec(t, p, b, "0", "sh", "-c", "kill -9 $(pgrep -o -x limbsd)"); code != 0 {
		t.Fatalf("kill -9 limbsd: exit %d: %s", code, out)
	}
	if ev := waitEvent(t, evs, b.spec.ID, sandbox.EventDied); ev.Reason != ReasonDaemonExited {
		t.Errorf("died event reason %q, want %q", ev.Reason, ReasonDaemonExited)
	}
	inst, err := p.Inspect(ctx, b.spec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if inst.State.Running || inst.State.Reason != ReasonDaemonExited {
		t.Errorf("state after kill -9: %+v, want stopped with reason %s", inst.State, ReasonDaemonExited)
	}
	if err := startReady(ctx, p, b.spec.ID); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, evs, b.spec.ID, sandbox.EventStarted)
	checkState(t, b)
}

// TestMemoryHog: a command that outgrows the memory limit is OOM-killed,
// the oom is reported, and limbsd and the session (with its cwd) live on.
func TestMemoryHog(t *testing.T) {
	p := newProvider(t)
	ctx := t.Context()
	b := newBox(t, p, func(s *sandbox.Spec) { s.MemoryMB = 256 })
	evs, err := p.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.lc.CreateSession(ctx, wire.CreateSession{})
	if err != nil {
		t.Fatal(err)
	}
	zero := 0.0
	exec := func(cmd string) wire.Result {
		t.Helper()
		r, err := b.lc.Exec(ctx, s.ID, wire.Exec{Command: cmd, Timeout: 120, YieldAfter: &zero})
		if err != nil {
			t.Fatalf("exec %q: %v", cmd, err)
		}
		return r
	}
	exec("mkdir -p /workspace/deep && cd /workspace/deep")
	r := exec("python3 -c 'b = bytearray(1 << 30)'")
	if exitCode(r) != 137 {
		t.Errorf("memory hog: exit %d (%q), want 137 (SIGKILL by the OOM killer)", exitCode(r), r.Output)
	}
	if ev := waitEvent(t, evs, b.spec.ID, sandbox.EventOOM); ev.Reason != ReasonOOMKilled {
		t.Errorf("oom event reason %q", ev.Reason)
	}
	if r := exec("pwd"); strings.TrimSpace(r.Output) != "/workspace/deep" {
		t.Errorf("session after the OOM kill: %+v", r)
	}
	inst, err := p.Inspect(ctx, b.spec.ID)
	if err != nil || !inst.State.Running {
		t.Errorf("sandbox after the OOM kill: %+v, %v; want running", inst.State, err)
	}
}

// TestLimbsdOOMKilled: when the OOM killer picks limbsd itself the sandbox
// dies with reason oom_killed (not daemon_exited), and Start brings it back
// with its sessions.
func TestLimbsdOOMKilled(t *testing.T) {
	p := newProvider(t)
	ctx := t.Context()
	b := newBox(t, p, func(s *sandbox.Spec) { s.MemoryMB = 256 })
	leaveState(t, b)
	evs, err := p.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Container root makes limbsd the OOM killer's first choice (the
	// agent user no longer can: limbsd is not its process).
	if out, code := dockerExec(t, p, b, "0", "sh", "-c", "echo 1000 > /proc/$(pgrep -o -x limbsd)/oom_score_adj"); code != 0 {
		t.Fatalf("oom_score_adj: exit %d: %s", code, out)
	}
	dockerExec(t, p, b, agentUser, "python3", "-c", "b = bytearray(1 << 30)")
	if ev := waitEvent(t, evs, b.spec.ID, sandbox.EventDied); ev.Reason != ReasonOOMKilled {
		t.Errorf("died event reason %q, want %q", ev.Reason, ReasonOOMKilled)
	}
	inst, err := p.Inspect(ctx, b.spec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if inst.State.Running || inst.State.Reason != ReasonOOMKilled {
		t.Errorf("state: %+v, want stopped with reason %s", inst.State, ReasonOOMKilled)
	}
	if err := startReady(ctx, p, b.spec.ID); err != nil {
		t.Fatal(err)
	}
	checkState(t, b)
}

// TestForkBomb: the pids limit holds a fork bomb; limbsd keeps answering
// while it runs and the sandbox is usable after it.
func TestForkBomb(t *testing.T) {
	p := newProvider(t)
	ctx := t.Context()
	b := newBox(t, p, nil)
	s, err := b.lc.CreateSession(ctx, wire.CreateSession{})
	if err != nil {
		t.Fatal(err)
	}
	yield := 2.0
	r, err := b.lc.Exec(ctx, s.ID, wire.Exec{Command: `bomb() { bomb | bomb & }; bomb`, Timeout: 20, YieldAfter: &yield})
	if err != nil {
		t.Fatalf("fork bomb: %v", err)
	}
	t.Logf("fork bomb: status %s exit %d", r.Status, exitCode(r))
	if _, err := b.lc.Health(ctx); err != nil {
		t.Errorf("limbsd during the fork bomb: %v", err)
	}
	if out, _ := dockerExec(t, p, b, "0", "sh", "-c", "cat /sys/fs/cgroup/pids/pids.current /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.current /sys/fs/cgroup/pids.max"); out != "" {
		t.Logf("pids.current, pids.max: %q", out)
	}
	// The bomb outlives its shell's job control: stopping the sandbox is
	// what ends it for sure.
	if err := p.Stop(ctx, b.spec.ID); err != nil {
		t.Fatal(err)
	}
	if err := startReady(ctx, p, b.spec.ID); err != nil {
		t.Fatal(err)
	}
	if r := b.run(t, "echo alive", 30); strings.TrimSpace(r.Output) != "alive" {
		t.Errorf("after the fork bomb: %+v", r)
	}
}

// TestRmRfRoot: rm -rf / as the agent user loses the workspace, not the
// system, the host or limbsd's binary; the sandbox comes back.
func TestRmRfRoot(t *testing.T) {
	p := newProvider(t)
	ctx := t.Context()
	b := newBox(t, p, nil)
	before, err := os.ReadFile(p.opts.LimbsdPath)
	if err != nil {
		t.Fatal(err)
	}
	b.run(t, "echo x > /workspace/lost", 30)
	// Through docker exec: the command deletes limbsd's socket too.
	dockerExec(t, p, b, agentUser, "rm", "-rf", "--no-preserve-root", "/")

	if out, code := dockerExec(t, p, b, "0", "sh", "-c", "test -s /etc/passwd && test -x /bin/bash && ls -A /workspace"); code != 0 || strings.TrimSpace(out) != "" {
		t.Errorf("after rm -rf /: exit %d, workspace listing %q; want the system intact and the workspace empty", code, out)
	}
	after, err := os.ReadFile(p.opts.LimbsdPath)
	if err != nil || !bytes.Equal(before, after) {
		t.Errorf("host limbsd binary changed or gone: %v", err)
	}
	if _, err := os.Stat(b.dir); err != nil {
		t.Errorf("host socket dir: %v", err)
	}
	// limbsd lost its socket file (only connections opened before survive):
	// Start on the running sandbox notices and restarts it.
	b.lc.HTTPClient().CloseIdleConnections()
	if _, err := os.Stat(filepath.Join(b.dir, "limbsd.sock")); err == nil {
		t.Logf("limbsd's socket survived rm -rf /")
	}
	if err := startReady(ctx, p, b.spec.ID); err != nil {
		t.Fatal(err)
	}
	if r := b.run(t, "id -u && ls /workspace | wc -l", 30); strings.Fields(r.Output)[0] != "1000" {
		t.Errorf("after rm -rf /: %+v", r)
	}
}

// TestFillTmp: /tmp is a size-limited tmpfs: the writer gets ENOSPC and
// nothing lands on the host's disk.
func TestFillTmp(t *testing.T) {
	p := newProvider(t)
	ctx := t.Context()
	b := newBox(t, p, func(s *sandbox.Spec) { s.TmpMB = 64 })
	r := b.run(t, "dd if=/dev/zero of=/tmp/fill bs=1M count=256", 120)
	if exitCode(r) == 0 || !strings.Contains(r.Output, "No space left on device") {
		t.Errorf("filling /tmp: exit %d, output %q; want ENOSPC", exitCode(r), r.Output)
	}
	res, err := p.cli.ContainerInspect(ctx, b.inst.ProviderID, client.ContainerInspectOptions{Size: true})
	if err != nil {
		t.Fatal(err)
	}
	if rw := res.Container.SizeRw; rw == nil || *rw > 16<<20 {
		t.Errorf("container writable layer grew to %v bytes: /tmp reached the host disk", rw)
	}
	if r := b.run(t, "rm /tmp/fill && echo freed", 30); strings.TrimSpace(r.Output) != "freed" {
		t.Errorf("after filling /tmp: %+v", r)
	}
}
