package shell

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
)

// killAfter ends the listed processes when the test ends, by pid (the
// session's close ends them too, but not a daemon that left it).
func killAfter(t *testing.T, ps []wire.BackgroundProcess) {
	t.Cleanup(func() {
		for _, p := range ps {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
	})
}

func TestBackgroundProcessesListed(t *testing.T) {
	m := newTestManager(t)
	s := newTestSession(t, m)

	// Something running before the command is not the command's.
	before := run(t, s, "sleep 101 & echo $!")
	killAfter(t, before.Background)
	if len(before.Background) != 1 || !strings.Contains(before.Background[0].Command, "sleep 101") {
		t.Fatalf("sleep 101 &: background %+v, want the sleep", before.Background)
	}
	if strconv.Itoa(before.Background[0].PID)+"\n" != before.Output {
		t.Fatalf("background pid %d, but $! printed %q", before.Background[0].PID, before.Output)
	}
	time.Sleep(30 * time.Millisecond) // the next command starts in a later clock tick

	r := run(t, s, "sleep 102 & nohup sleep 103 >/dev/null 2>&1 & setsid sleep 104 & sleep 0.3")
	killAfter(t, r.Background)
	var got []string
	for _, p := range r.Background {
		got = append(got, p.Command)
	}
	want := []string{"sleep 102", "sleep 103", "sleep 104"}
	if r.BackgroundCount != 3 || strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("background %q (count %d), want %q: the sleep 101 of the previous command must not be listed", got, r.BackgroundCount, want)
	}

	// A subshell is named as one, not as a second shell.
	sub := run(t, s, "(sleep 106; true) & true")
	killAfter(t, sub.Background)
	if len(sub.Background) != 2 || sub.Background[0].Command != "[subshell]" || sub.Background[1].Command != "sleep 106" {
		t.Fatalf("(sleep 106; true) &: background %+v, want [subshell] and sleep 106", sub.Background)
	}

	// A command that leaves nothing running lists nothing.
	if r := run(t, s, "echo hi; (sleep 0.1 &); sleep 0.3"); len(r.Background) != 0 || r.BackgroundCount != 0 {
		t.Fatalf("a command whose children ended lists %+v", r.Background)
	}
}

func TestBackgroundCapped(t *testing.T) {
	m := newTestManager(t)
	s := newTestSession(t, m)
	r := run(t, s, "for i in $(seq 1 14); do sleep 10$i & done")
	killAfter(t, r.Background)
	if r.BackgroundCount != 14 || len(r.Background) != maxBackground {
		t.Fatalf("count %d, listed %d; want 14 and %d", r.BackgroundCount, len(r.Background), maxBackground)
	}
}

func TestBackgroundCmdlineHostile(t *testing.T) {
	m := newTestManager(t)
	s := newTestSession(t, m)
	// exec -a sets argv[0] to anything: escapes, a newline, invalid UTF-8, a very long name.
	long := strings.Repeat("x", 5000)
	r := run(t, s, "(exec -a $'evil\\e]0;t\\a\\nline\\xff"+long+"' sleep 105) & true")
	killAfter(t, r.Background)
	if len(r.Background) != 1 {
		t.Fatalf("background %+v, want one", r.Background)
	}
	c := r.Background[0].Command
	if strings.ContainsAny(c, "\x1b\a\n") || !strings.HasPrefix(c, `evil\x1b]0;t\a\nline\xff`) || len(c) > maxCmdlineShown+10 || !strings.HasSuffix(c, "...") {
		t.Fatalf("command %q: want control characters visible and the length clamped", c)
	}
	if cmdlineOf(os.Getpid()) == "" {
		t.Fatal("no command line for this process")
	}
}

func BenchmarkBackgroundScan(b *testing.B) {
	m, err := NewManager(b.Context(), Options{StateDir: b.TempDir(), Workdir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	s, err := m.Create(b.Context(), wire.CreateSession{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.Exec(b.Context(), wire.Exec{Command: "true", YieldAfter: f(20)}); err != nil {
		b.Fatal(err)
	}
	s.mu.Lock()
	p := s.p
	s.mu.Unlock()
	// every: each process /proc lists, as when the window is not known;
	// window: the pids allocated since a command was typed just now.
	b.Run("every", func(b *testing.B) {
		for b.Loop() {
			p.leftRunning(ticksAt(time.Now()), lastPidUnknown, time.Now())
		}
	})
	b.Run("window", func(b *testing.B) {
		for b.Loop() {
			p.leftRunning(ticksAt(time.Now()), lastPid(), time.Now())
		}
	})
}

func TestPidWindow(t *testing.T) {
	w := pidWindow{from: 10, now: 13, max: 100}
	if w.size() != 3 || !slices.Equal(w.pids(), []int{11, 12, 13}) || w.has(10) || !w.has(13) || w.has(14) {
		t.Fatalf("window %+v: size %d, pids %v", w, w.size(), w.pids())
	}
	// Wrapped at pid_max: 98, 99, then 1 and 2.
	w = pidWindow{from: 97, now: 2, max: 100}
	if w.size() != 4 || !slices.Equal(w.pids(), []int{98, 99, 1, 2}) || w.has(97) || w.has(3) || !w.has(99) || !w.has(1) || w.has(0) {
		t.Fatalf("window %+v: size %d, pids %v", w, w.size(), w.pids())
	}
	if _, ok := newPidWindow(lastPidUnknown, 0); ok {
		t.Fatal("a window with no first pid")
	}
	if _, ok := newPidWindow(lastPid(), time.Hour); ok {
		t.Fatal("a window trusted for an hour-long command")
	}
	if lastPid() == lastPidUnknown {
		t.Skip("no /proc/sys/kernel/ns_last_pid here")
	}
	from := lastPid()
	cmd := exec.Command("sleep", "0")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	w, ok := newPidWindow(from, time.Millisecond)
	if !ok || !w.has(cmd.Process.Pid) {
		t.Fatalf("window %+v (trusted %v) lacks the pid %d forked in it", w, ok, cmd.Process.Pid)
	}
	if !isProcess(os.Getpid()) {
		t.Fatal("this process is not a process")
	}
}

// A thread started during a command, in a process of the command's
// session, is no process left running: /proc/TID answers like a
// process, but only processes count.
func TestPidWindowSkipsThreads(t *testing.T) {
	tids, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Skip(err)
	}
	for _, e := range tids {
		tid, _ := strconv.Atoi(e.Name())
		if tid != os.Getpid() && isProcess(tid) {
			t.Fatalf("thread %d taken for a process", tid)
		}
	}
}
