package shell

import (
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Processes a command left running.
//
// When a command ends, its final result lists the processes of the
// shell's session (kill.go's members: its session and process groups,
// their descendants, holders of its terminal) other than the shell that
// are still alive and started in or after the tick in which the command
// was typed: `sleep 100 &`, `nohup server &`, a `setsid` child that kept
// the terminal. Processes that existed before the command are not listed
// (the start-time comparison has the granularity of a clock tick, 10 ms:
// a process started in the last tick before the command may be listed).
// A daemon that left the session, the terminal and the process tree
// (setsid with every descriptor redirected, then orphaned) is out of
// sight, as it is of the session's kill.
//
// Everything read here comes from /proc, which the sandbox writes (a
// process sets its own cmdline): the command line is read up to a bound,
// clamped, and its control characters and invalid UTF-8 are made
// visible.

const (
	// maxBackground is how many processes a result lists; background_count
	// says how many there were.
	maxBackground = 10
	// maxCmdlineRead is how much of /proc/PID/cmdline is read.
	maxCmdlineRead = 4096
	// maxCmdlineShown is the most bytes of a command line a result shows.
	maxCmdlineShown = 200
	// backgroundSettle is how long processes found at a command's end get
	// to settle before they are listed.
	backgroundSettle = 20 * time.Millisecond
	// settleLooks bounds the looks until two in a row agree.
	settleLooks = 6
)

// backgroundOf fills r's background fields for command c, which ended
// while the shell p lived on.
func (s *Session) backgroundOf(c *command, p *proc, r *wire.Result) {
	if p == nil || c.shellEnd || c.replaced || isClosed(p.exited) {
		return
	}
	since := ticksAt(c.typedAt)
	if len(p.leftRunning(since, c.lastPid, c.typedAt)) == 0 {
		return
	}
	// Processes in flux when the command ended settle first: setsid
	// forking its child and exiting, a job that has not yet run its
	// program (a fork of the shell, with the shell's command line), a job
	// about to end. The list is the first of two looks in a row that
	// agree, at most settleLooks looks after the first.
	shellCmd := cmdlineOf(p.pid)
	var list []wire.BackgroundProcess
	n := 0
	for round := 0; round < settleLooks; round++ {
		time.Sleep(backgroundSettle)
		l, m := p.backgroundList(since, c.lastPid, c.typedAt)
		if round > 0 && slices.Equal(l, list) && m == n {
			break
		}
		list, n = l, m
	}
	for i := range list {
		if list[i].Command == shellCmd {
			list[i].Command = "[subshell]" // a ( ... ) & subshell
		}
	}
	r.Background, r.BackgroundCount = list, n
}

// backgroundList is one look at the processes left running: the first
// maxBackground in the order they started, with their command lines, and
// how many there are.
func (p *proc) backgroundList(since uint64, from int, typed time.Time) ([]wire.BackgroundProcess, int) {
	procs := p.leftRunning(since, from, typed)
	sort.Slice(procs, func(i, j int) bool {
		if procs[i].start != procs[j].start {
			return procs[i].start < procs[j].start
		}
		return procs[i].pid < procs[j].pid
	})
	var list []wire.BackgroundProcess
	n := 0
	for _, st := range procs {
		if len(list) == maxBackground {
			n++
			continue
		}
		cmd := cmdlineOf(st.pid)
		if now, ok := readStat(st.pid); !ok || now.start != st.start || now.state == 'Z' || now.state == 'X' {
			continue // gone while it was read
		}
		list = append(list, wire.BackgroundProcess{PID: st.pid, Command: cmd})
		n++
	}
	return list, n
}

// leftRunning lists the live processes of p's session that started in or
// after tick since, other than the shell: kill.go's membership (session
// and process group ids, parents, the controlling terminal, holders of
// the terminal) applied to the processes that started since then only,
// so that the cost at each command's end is one read of /proc/PID/stat per
// process, plus the descriptors of the few new ones. from is the last pid
// allocated before the command was typed (lastPidUnknown for none): only
// the pids allocated since are read when that window can be trusted
// (pidwindow.go).
func (p *proc) leftRunning(since uint64, from int, typed time.Time) []procStat {
	g := newProcGroupAt(p.pid, p.started, p.tty, true)
	g.ttyDev, g.ttyIno = p.ttyDev, p.ttyIno
	pids, listed := candidatePids(from, typed)
	var fresh []procStat
	for _, pid := range pids {
		st, ok := readStat(pid)
		if !ok || st.pid == p.pid || st.start < since || g.excluded(st) || g.otherShell(st) {
			continue
		}
		if st.state == 'Z' || st.state == 'X' || st.state == 'x' {
			continue
		}
		if !listed && !isProcess(pid) {
			continue
		}
		fresh = append(fresh, st)
	}
	in := map[int]bool{p.pid: true}
	var out []procStat
	// Each pass adds at least one process or ends: at most len(fresh)+1.
	for changed := true; changed; {
		changed = false
		for _, st := range fresh {
			if in[st.pid] {
				continue
			}
			if g.sids[st.session] || g.pgrps[st.pgrp] || in[st.ppid] ||
				(g.tty != 0 && st.tty == g.tty && g.sameMounts(st.pid)) ||
				(g.ttyPath != "" && g.holdsTerminal(st.pid)) {
				in[st.pid] = true
				g.sids[st.session], g.pgrps[st.pgrp] = true, true
				out = append(out, st)
				changed = true
			}
		}
	}
	return out
}

// candidatePids is the pids that may be of processes a command typed
// when the last pid was from, at typed, made: the window of pids since
// then when it is small, the processes /proc lists in it when it is not,
// every process /proc lists when the window cannot be trusted. listed
// tells that each is a process /proc listed, not maybe another thread.
func candidatePids(from int, typed time.Time) (pids []int, listed bool) {
	if w, ok := newPidWindow(from, time.Since(typed)); ok && w.size() <= maxWindowPids {
		return w.pids(), false
	}
	all := allPids()
	// Read after the listing, the window holds every listed pid the
	// command's processes were given.
	w, ok := newPidWindow(from, time.Since(typed))
	if !ok {
		return all, true
	}
	out := all[:0]
	for _, pid := range all {
		if w.has(pid) {
			out = append(out, pid)
		}
	}
	return out, true
}

// cmdlineOf is pid's command line as a model may read it: the arguments
// joined by spaces, or the process name in brackets when it has none.
func cmdlineOf(pid int) string {
	dir := "/proc/" + strconv.Itoa(pid)
	b := readBounded(dir+"/cmdline", maxCmdlineRead)
	b = []byte(strings.TrimRight(string(b), "\x00"))
	if len(b) == 0 {
		comm := readBounded(dir+"/comm", 64)
		return "[" + visible(strings.TrimSuffix(string(comm), "\n"), maxCmdlineShown) + "]"
	}
	return visible(strings.ReplaceAll(string(b), "\x00", " "), maxCmdlineShown)
}

// readBounded reads at most n bytes of a file; nothing when it cannot.
func readBounded(path string, n int64) []byte {
	b, _ := readProc(path, nil, int(n))
	return b
}

// visible makes control characters and invalid UTF-8 of s visible (\n,
// \x1b, \xff) and clamps it to about max bytes, marking the cut with "...".
func visible(s string, max int) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		if b.Len() >= max {
			b.WriteString("...")
			break
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			b.WriteString(`\x` + strconv.FormatUint(uint64(s[i])|0x100, 16)[1:])
		case r == '\\':
			b.WriteString(`\\`)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == 0x2028 || r == 0x2029 || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069):
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}
