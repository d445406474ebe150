package shell

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Stopping one command (timeout, interrupt), as opposed to ending the
// shell (kill.go).
//
// The command's processes are the session's members (kill.go) that
// started at or after the tick in which the command was typed, except the
// shell itself. The escalation is: SIGINT to the foreground job, then
// SIGTERM, each with its grace; a command that ends meanwhile loses the
// processes it left in the process groups that were its foreground jobs
// (the background children of a `bash -c`, which ignore SIGINT). A command
// that outlives them gets the hard stop: SIGINT to the shell itself first,
// so that bash abandons the rest of the command text once its job is
// gone (an interactive bash that got SIGINT while it waited for a job
// throws to its top level, which ends a sourced file, a list or a loop),
// then SIGKILL to every one of the command's processes, round after round
// until none is left; its background jobs and their children included.
// If the shell still does not come back to its prompt, the shell goes
// (killTree) and the session gets a new one.

// clockTicks is the unit of /proc/PID/stat's start time (USER_HZ).
const clockTicks = 100

// bootTicks is the time since boot in /proc's clock ticks.
func bootTicks() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return uint64(ts.Nano()) / (1e9 / clockTicks)
}

// ticksAt is the boot tick in which t was, as /proc counts it.
func ticksAt(t time.Time) uint64 {
	now := bootTicks()
	ago := uint64(time.Since(t) / (time.Second / clockTicks))
	if ago >= now {
		return 0
	}
	// The tick t was in, one earlier for the rounding of both clocks.
	return now - ago - 1
}

// commandProcs lists the live processes of p's session that started in or
// after tick since, other than the shell; with groups, only those in one of
// those process groups.
func (p *proc) commandProcs(since uint64, groups map[int]bool) []procStat {
	g := newProcGroup(p.pid, p.tty, !isClosed(p.exited))
	var out []procStat
	for _, st := range g.scan(true) {
		if st.pid == p.pid || st.start < since || st.state == 'Z' || st.state == 'X' || st.state == 'x' {
			continue
		}
		if groups != nil && !groups[st.pgrp] {
			continue
		}
		out = append(out, st)
	}
	return out
}

// killCommandProcs sends SIGKILL to the command's processes until none is
// left or the deadline passes, and reports whether none is left. Signals
// go by pid: the command's processes may share the shell's process group
// (a command substitution), which must not be signalled.
func (p *proc) killCommandProcs(since uint64, groups map[int]bool, deadline time.Time) bool {
	for round := 0; round < killRounds; round++ {
		ms := p.commandProcs(since, groups)
		if len(ms) == 0 {
			return true
		}
		// No SIGSTOP first (as killTree does): bash takes a stopped
		// foreground job for one suspended with ^Z and reports it later.
		for _, m := range ms {
			_ = unix.Kill(m.pid, unix.SIGKILL)
		}
		if time.Now().After(deadline) {
			return false
		}
		pause(round)
	}
	return false
}

// interruptShell sends SIGINT to the shell itself.
func (p *proc) interruptShell() {
	_ = syscall.Kill(p.pid, syscall.SIGINT)
}
