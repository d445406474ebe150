// Package sysmon keeps the Go runtime's system monitor thread of a
// long-lived process on the request path (limbs serve) out of its deep
// sleep, by starting the process again with the runtime's schedtrace
// setting. It must never change what the process's children inherit: the
// GODEBUG they see is the one the process was started with.
//
// Why: sysmon, the runtime's watchdog thread, sleeps on a futex once every
// P is idle, and the next system call of any goroutine wakes it, after
// which it polls every 20 µs until the process is idle again. limbs serve
// goes idle and busy again several times per forwarded command (the
// client's request, limbsd's answer, the follower's batch), so each command
// paid for a futex wake-up and a handful of context switches of a thread
// that had nothing to do: on a 2-core VM, 100 of the 350 µs of CPU that
// limbs serve spent per command, and about 5% of a round trip (docs/bench.md).
// With schedtrace set, the runtime keeps sysmon out of that sleep (so that
// it can print at the right time); once nothing happens for a while, it
// polls every 10 ms instead: about 100 wake-ups a second in an idle
// process, 2 ms of CPU a second on that VM. That is a fair price for the
// one limbs serve of a host, and too high for limbsd, of which a host runs
// hundreds, mostly idle: limbsd does not use this package.
//
// schedtrace=N prints a line of scheduler state on stderr whenever N
// milliseconds have passed since the last (the first when the host's
// monotonic clock passes N ms). N is the largest the runtime accepts,
// 2147483647 ms (24.8 days of the host's uptime), and the process is not
// started again on a host up for longer than [maxUptime], where the line
// would come at once: a process that lives past the mark writes one line
// then, and one every 24.8 days. With schedtrace set, the runtime also
// prints its scheduler state (a line per P, M and goroutine) before the
// traceback of a crash or of SIGQUIT. The process's /proc/PID/environ (and
// ps e) shows the environment of the new start, the setting and the
// carrier of the first GODEBUG included; what the process itself reads
// and what its children inherit is the first GODEBUG. A GODEBUG that sets
// schedtrace itself (GODEBUG=schedtrace=0 turns this off) is left alone.
package sysmon

import (
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// setting is what Awake adds to GODEBUG.
	setting = "schedtrace=2147483647"
	// mark is 2147483647 ms: when the runtime would first print.
	mark = 2147483647 * time.Millisecond
	// maxUptime: past it, Awake does not start the process again.
	maxUptime = mark - 24*time.Hour
	// origEnv carries, across the new start, the GODEBUG the process was
	// started with: "=" and its value, or "unset".
	origEnv = "LIMBS_SYSMON_GODEBUG"
)

// Awake starts the running program again (execve of /proc/self/exe, the
// very file that runs, with the same arguments) in the same process, with
// schedtrace added to its GODEBUG, unless it already runs so. It returns
// in the process that runs so, after putting back the GODEBUG the process
// was first started with; it also returns, leaving everything as it is,
// when GODEBUG sets schedtrace already, when the host has been up too long
// (see the package doc), or when the program cannot be started again.
//
// Call it from main, first thing, before signal handlers and anything
// else: what the process opened stays open across the new start, nothing
// else survives it (a SIGTERM before it ends the process as it would any
// program starting). Never call it from a test binary: it would start the
// tests again.
func Awake() {
	if orig, ok := os.LookupEnv(origEnv); ok {
		if strings.HasPrefix(os.Getenv("GODEBUG"), setting) {
			restore(orig)
			awakened = true
			return
		}
		// A carrier this package did not just set (copied from
		// /proc/PID/environ into an env file, say): it says nothing of
		// this process's GODEBUG, which stays as it is.
		os.Unsetenv(origEnv)
	}
	env, ok := plan(os.Environ(), uptime())
	if !ok {
		return
	}
	// On success this does not return; it fails when /proc is not
	// mounted, and the process goes on as it is.
	_ = syscall.Exec("/proc/self/exe", os.Args, env)
}

// awakened is set by Awake in the process it started again.
var awakened bool

// Awakened reports whether Awake started this process again with sysmon
// kept awake.
func Awakened() bool { return awakened }

// plan is the environment of the new start, or false when the process
// is to go on as it is.
func plan(env []string, up time.Duration) ([]string, bool) {
	if up <= 0 || up >= maxUptime {
		return nil, false
	}
	orig, had := "", false
	out := make([]string, 0, len(env)+2)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case origEnv:
			continue
		case "GODEBUG":
			if hasSchedtrace(v) {
				return nil, false
			}
			orig, had = v, true
			continue
		}
		out = append(out, kv)
	}
	debug, saved := setting, "unset"
	if had {
		saved = "=" + orig
		if orig != "" {
			// Later settings win: the operator's, after ours, cannot
			// name schedtrace (checked above), so this only adds.
			debug = setting + "," + orig
		}
	}
	return append(out, "GODEBUG="+debug, origEnv+"="+saved), true
}

// hasSchedtrace reports whether a GODEBUG value sets schedtrace.
func hasSchedtrace(v string) bool {
	for f := range strings.SplitSeq(v, ",") {
		// As the runtime reads it: no space is trimmed.
		if k, _, _ := strings.Cut(f, "="); k == "schedtrace" {
			return true
		}
	}
	return false
}

// restore puts back the GODEBUG saved in orig. The runtime read
// schedtrace when the process started and keeps it; the settings it
// reads again when GODEBUG changes are the process's first ones again.
func restore(orig string) {
	os.Unsetenv(origEnv)
	if v, ok := strings.CutPrefix(orig, "="); ok {
		os.Setenv("GODEBUG", v)
		return
	}
	os.Unsetenv("GODEBUG")
}

// uptime is the host's monotonic clock, which the runtime's schedtrace
// counts from; 0 when it cannot be read.
func uptime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
