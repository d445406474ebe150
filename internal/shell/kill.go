package shell

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Ending a shell and everything it started.
//
// One mechanism ends a session's processes, whoever asks: restart, delete,
// the daemon's shutdown, a shell that never showed a prompt, and a command
// that survived the SIGKILL of its process group all call proc.killTree.
// Killing a process tree one process at a time loses to a fork bomb: each
// kill makes room for a new child that the kill list does not name. So
// killTree first stops every member (SIGSTOP cannot be caught, and a
// stopped process cannot fork), scanning /proc again after each round and
// stopping the new ones, until a scan finds no member running; only then
// does it SIGKILL them all, again round after round until none is left.
// Both phases are bounded in rounds and time; whatever survives is named in
// the error. Signals go by pid with kill(2) and membership is read from
// /proc, so none of this assumes that the shells run as the daemon's uid.
// (A cgroup freezer would do the stopping in one write, but inside a
// container the daemon can rarely create a cgroup; this needs none.)
//
// The members of a session are the processes that, in one scan, have:
//   - the shell's session id, or the session or process group of a member
//     (a process that called setsid() leaves the shell's session, not the
//     tree);
//   - a member as parent (/proc/PID/stat ppid), followed to a fixed point;
//   - the session's terminal as controlling terminal, in the daemon's
//     mount namespace (/proc names a controlling terminal only by its
//     number, which a terminal of another devpts instance, another
//     container's, shares);
//   - and, in the first scan and the one that confirms a phase is over,
//     the terminal open on a descriptor, the same inode (a daemonised
//     child re-parented to init that still writes to the terminal).
//
// A member is remembered by pid and start time, so a reused pid is never
// signalled. Never a member: the daemon, its session and process group,
// PID 1, and the daemon's other children (the shells of other sessions).
// The terminal is held open (a copy of the master) while killTree runs,
// so that its number is not given to another session's terminal
// meanwhile. A process that left the session, its parent and the terminal
// (setsid, double fork, all descriptors redirected) cannot be told apart
// from any other process of the sandbox's user: stopping the sandbox ends
// it.
//
// Goroutines per shell: the read loop (Session.readLoop) is the only reader
// of the terminal master; the waiter (proc.wait) is the only caller of
// Wait, so the shell is reaped as soon as it dies even while a process it
// left behind keeps the terminal open; killTree runs in the caller's
// goroutine, one at a time (killMu). The master is closed exactly once
// (closePTY): by the read loop's end (Session.onExit), by killTree when
// every member is dead and the terminal still does not hang up (a holder
// it could not find), or by the waiter when the shell died and a process
// it left behind keeps the terminal open; the last two end the read loop.

// reaper is the part of a proc that ends and reaps it.
type reaper struct {
	exited    chan struct{} // closed once the waiter reaped the shell; status is set then
	readEnded chan struct{} // closed when the read loop stopped reading the terminal
	closeOnce sync.Once     // guards the one Close of the terminal master
	killMu    sync.Mutex    // one killTree at a time
}

// Bounds of killTree. Variables so that tests can shorten them.
var (
	killStopWait = 3 * time.Second // the stop phase
	killWait     = 5 * time.Second // the kill phase, and then the reaping of the shell
	killRounds   = 3000            // scans per phase
	// After the last member died, how long the read loop may drain the
	// terminal before the master is closed under it.
	hangupWait = time.Second
)

// startReaper starts the waiter; called once, right after spawn.
func (p *proc) startReaper() {
	p.exited = make(chan struct{})
	p.readEnded = make(chan struct{})
	go p.wait()
}

// wait is the only caller of p.cmd.Wait.
func (p *proc) wait() {
	err := p.cmd.Wait()
	status := 0
	if ps := p.cmd.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			status = 128 + int(ws.Signal())
		} else {
			status = ps.ExitCode()
		}
	} else if err != nil {
		status = 255
	}
	p.status = status
	close(p.exited)
	// A process the shell left behind (a background job) may hold the
	// terminal open, and the read loop waiting, for as long as it runs:
	// the terminal of a dead shell is hung up, so that the session gets a
	// new shell and the master is not kept open.
	t := time.NewTimer(hangupWait)
	defer t.Stop()
	select {
	case <-p.readEnded:
	case <-t.C:
		p.closePTY()
	}
}

// closePTY closes the terminal master, once; the read loop then ends.
func (p *proc) closePTY() {
	p.closeOnce.Do(func() { p.ptmx.Close() })
}

// killTree stops, then kills, every process of the shell's session (see
// the top of this file), waits until the shell is reaped and makes sure
// the read loop ends. It returns an error naming what survived.
func (p *proc) killTree() error {
	p.killMu.Lock()
	defer p.killMu.Unlock()
	// The terminal's number is given to the next terminal opened once
	// the master is closed (the read loop's end closes it meanwhile):
	// holding a copy keeps it ours until the end, and without one the
	// terminal does not tell members apart.
	tty := p.tty
	held, dupErr := -1, error(nil)
	if err := p.control(func(fd int) { held, dupErr = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0) }); err != nil || dupErr != nil {
		tty = 0
	} else {
		defer unix.Close(held)
	}
	g := newProcGroup(p.pid, tty, !isClosed(p.exited))
	if tty != 0 {
		g.ttyDev, g.ttyIno = p.ttyDev, p.ttyIno
	}
	stopped := g.stop(time.Now().Add(killStopWait))
	left := g.kill(time.Now().Add(killWait))
	t := time.NewTimer(killWait)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		return fmt.Errorf("the shell (pid %d) was not reaped %s after SIGKILL; stop the sandbox to end it", p.pid, killWait)
	}
	t.Reset(hangupWait)
	select {
	case <-p.readEnded:
	case <-t.C:
		p.closePTY()
	}
	if len(left) > 0 {
		why := ""
		if !stopped {
			why = " (they could not all be stopped first)"
		}
		return fmt.Errorf("%d processes of the shell's session survived SIGKILL%s: %s; stop the sandbox to end them", len(left), why, describe(left))
	}
	return nil
}

// procGroup is what one killTree knows of a session's processes.
type procGroup struct {
	self, selfPgrp, selfSid int
	tty                     uint64
	ttyPath                 string
	// The terminal's inode (its devpts instance and number): a terminal
	// number is unique only within one devpts instance, and every
	// container has its own.
	ttyDev, ttyIno uint64
	mntNS          string         // the daemon's mount namespace (/proc/self/ns/mnt)
	known          map[int]uint64 // pid → start time of every member seen
	sids, pgrps    map[int]bool
}

func newProcGroup(shell int, tty uint64, alive bool) *procGroup {
	return newProcGroupAt(shell, 0, tty, alive)
}

// newProcGroupAt is newProcGroup for a shell whose start time is known
// (start, 0 when not): an alive shell's does not change, and reading its
// stat again cost each command's end some 13 µs.
func newProcGroupAt(shell int, start uint64, tty uint64, alive bool) *procGroup {
	g := &procGroup{
		self: os.Getpid(), tty: tty, known: map[int]uint64{},
		sids: map[int]bool{}, pgrps: map[int]bool{},
	}
	self := selfIDs()
	g.selfPgrp, g.selfSid = self.pgrp, self.sid
	if tty != 0 {
		g.ttyPath = "/dev/pts/" + strconv.FormatUint(uint64(unix.Minor(tty)), 10)
		g.mntNS = self.mntNS
	}
	// An unreaped shell's pid is not reused, and the kernel keeps a
	// session or process group id allocated while a process uses it: the
	// shell's own ids are safe to follow as long as it was not reaped.
	if alive {
		if start != 0 {
			g.known[shell] = start
		} else if st, ok := readStat(shell); ok {
			g.known[shell] = st.start
		}
		g.sids[shell] = true
		g.pgrps[shell] = true
	}
	return g
}

// selfIDs is what newProcGroup needs of limbsd itself, read once it was
// read whole: its process group, session and mount namespace do not
// change while it runs. A read that failed (a /proc that would not
// answer) is tried again at the next call.
func selfIDs() selfIDSet {
	selfCache.Lock()
	defer selfCache.Unlock()
	if selfCache.ok {
		return selfCache.ids
	}
	var ids selfIDSet
	st, ok := readStat(os.Getpid())
	if ok {
		ids.pgrp, ids.sid = st.pgrp, st.session
	}
	ns, err := os.Readlink("/proc/self/ns/mnt")
	ids.mntNS = ns
	if ok && err == nil {
		selfCache.ids, selfCache.ok = ids, true
	}
	return ids
}

type selfIDSet struct {
	pgrp, sid int
	mntNS     string
}

var selfCache struct {
	sync.Mutex
	ok  bool
	ids selfIDSet
}

// excluded is what is never a member, whatever it shares with one.
func (g *procGroup) excluded(st procStat) bool {
	return st.pid == g.self || st.pid <= 1 || st.session == 0 ||
		(g.selfSid != 0 && st.session == g.selfSid) || (g.selfPgrp != 0 && st.pgrp == g.selfPgrp)
}

// otherShell: a child of the daemon is a shell, and the only one that is
// a member is the session's own (known by pid and start time): another
// session's shell may have been given a pid that this session's processes
// used as a session or group id before they died.
func (g *procGroup) otherShell(st procStat) bool {
	return st.ppid == g.self
}

// scan reads /proc and returns the members alive now (zombies included);
// deep also looks for the terminal among every process's descriptors.
func (g *procGroup) scan(deep bool) []procStat {
	var stats []procStat
	for _, pid := range allPids() {
		if st, ok := readStat(pid); ok && !g.excluded(st) {
			stats = append(stats, st)
		}
	}
	in := map[int]bool{}
	var out []procStat
	add := func(st procStat) {
		in[st.pid] = true
		g.known[st.pid] = st.start
		if st.session != 0 {
			g.sids[st.session] = true
		}
		if st.pgrp != 0 {
			g.pgrps[st.pgrp] = true
		}
		out = append(out, st)
	}
	for _, st := range stats {
		if start, ok := g.known[st.pid]; ok && start == st.start {
			add(st)
		}
	}
	var holders map[int]bool
	if deep && g.ttyPath != "" {
		holders = map[int]bool{}
		for _, st := range stats {
			if !in[st.pid] && !g.otherShell(st) && g.holdsTerminal(st.pid) {
				holders[st.pid] = true
			}
		}
	}
	// Each pass adds at least one process or ends: at most len(stats)+1.
	for changed := true; changed; {
		changed = false
		for _, st := range stats {
			if in[st.pid] || g.otherShell(st) {
				continue
			}
			if g.sids[st.session] || g.pgrps[st.pgrp] || in[st.ppid] ||
				(g.tty != 0 && st.tty == g.tty && g.sameMounts(st.pid)) || holders[st.pid] {
				add(st)
				changed = true
			}
		}
	}
	return out
}

// holdsTerminal reports whether pid has the session's terminal open.
func (g *procGroup) holdsTerminal(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	f, err := os.Open(dir)
	if err != nil {
		return false // gone, or not ours to read
	}
	defer f.Close()
	// Every descriptor: a holder may keep the terminal past the first
	// thousands (its descriptor limit bounds the reading).
	names, _ := f.Readdirnames(-1)
	for _, n := range names {
		if l, err := os.Readlink(dir + "/" + n); err == nil && l == g.ttyPath {
			// The same name may be another devpts instance's terminal
			// (another container's): only the same inode is ours.
			var st unix.Stat_t
			if unix.Stat(dir+"/"+n, &st) == nil && st.Ino == g.ttyIno && uint64(st.Dev) == g.ttyDev {
				return true
			}
		}
	}
	return false
}

// sameMounts reports whether pid sees the daemon's file systems, and so
// its devpts instance: a controlling terminal is known in /proc only by
// its number, which another container's terminal can share. A process
// whose namespace cannot be read is not counted by its terminal.
func (g *procGroup) sameMounts(pid int) bool {
	if g.mntNS == "" {
		return false
	}
	ns, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/mnt")
	return err == nil && ns == g.mntNS
}

// halted: stopped, traced, or dead; none of them can fork.
func halted(state byte) bool {
	switch state {
	case 'T', 't', 'Z', 'X', 'x':
		return true
	}
	return false
}

// pause lets the signalled processes run into their stop or death.
func pause(round int) {
	time.Sleep(time.Duration(min(round+1, 10)) * 200 * time.Microsecond)
}

// stop sends SIGSTOP to every member until a deep scan finds them all
// halted or stopping. It reports whether it got there before the deadline.
func (g *procGroup) stop(deadline time.Time) bool {
	confirm := true // the first scan is deep
	// Members sent SIGSTOP in an earlier round (pid → start time). One
	// with the stop pending may still show as running (on a loaded
	// machine it waits for a CPU to act on it) but can no longer fork: a
	// fork fails and is restarted once the signal is handled. So the
	// phase is over when a deep scan finds no member that is neither
	// halted nor already sent the stop; a member continued meanwhile by
	// someone else is still met by the rounds of SIGKILL.
	sent := map[int]uint64{}
	for round := 0; round < killRounds; round++ {
		ms := g.scan(confirm)
		moving := 0
		for _, m := range ms {
			if start, ok := sent[m.pid]; !halted(m.state) && (!ok || start != m.start) {
				moving++
			}
		}
		signalAll(ms, unix.SIGSTOP)
		for _, m := range ms {
			sent[m.pid] = m.start
		}
		if moving == 0 {
			if confirm {
				return true
			}
			confirm = true
			continue
		}
		confirm = false
		if time.Now().After(deadline) {
			return false
		}
		pause(round)
	}
	return false
}

// kill sends SIGKILL to every member until a deep scan finds none alive,
// and returns the members still alive at the deadline.
func (g *procGroup) kill(deadline time.Time) []procStat {
	confirm := false
	var live []procStat
	for round := 0; round < killRounds; round++ {
		ms := g.scan(confirm)
		live = live[:0]
		for _, m := range ms {
			if m.state != 'Z' && m.state != 'X' && m.state != 'x' {
				live = append(live, m)
			}
		}
		signalAll(ms, unix.SIGKILL)
		if len(live) == 0 {
			if confirm {
				return nil
			}
			confirm = true
			continue
		}
		confirm = false
		if time.Now().After(deadline) {
			break
		}
		pause(round)
	}
	return live
}

// signalAll sends sig to the process groups of the members, then to each
// member. A group signal reaches every process of the group at once,
// children being forked included: a process that forks and exits at once
// (its pid gone before a list of pids can be used) cannot outrun it. Only
// groups that a member of this scan belongs to are signalled: while a
// process uses a group id the kernel does not give it to another group.
// Zombies too: a thread group leader that exited shows Z while its other
// threads may still run.
func signalAll(ms []procStat, sig unix.Signal) {
	groups := map[int]bool{}
	for _, m := range ms {
		if m.pgrp > 1 && !groups[m.pgrp] {
			groups[m.pgrp] = true
			_ = unix.Kill(-m.pgrp, sig)
		}
	}
	for _, m := range ms {
		_ = unix.Kill(m.pid, sig)
	}
}

// describe names at most ten processes with their state.
func describe(ps []procStat) string {
	sort.Slice(ps, func(i, j int) bool { return ps[i].pid < ps[j].pid })
	var b strings.Builder
	for i, st := range ps {
		if i == 10 {
			fmt.Fprintf(&b, " and %d more", len(ps)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "pid %d (state %c)", st.pid, st.state)
	}
	return b.String()
}
