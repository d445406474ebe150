package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// childEnv marks the re-executed daemon, so that it does not become an init
// again.
const childEnv = "LIMBSD_INIT_CHILD"

// runInit is what limbsd does as PID 1. Orphaned processes (a shell's
// background job whose shell was killed, a daemonised server) are re-parented
// to PID 1 and stay zombies unless it reaps them. The daemon cannot reap with
// wait4(-1) itself without stealing exit statuses from os/exec, so PID 1
// becomes a separate, minimal init: it starts the real daemon as its child,
// forwards signals to it, reaps everything, and exits with the daemon's
// status. (`docker run --init` does the same and makes this unnecessary.)
func runInit() int {
	exe, err := os.Executable()
	if err != nil {
		exe = "/proc/self/exe"
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH)
	child, err := os.StartProcess(exe, os.Args, &os.ProcAttr{
		Env:   append(os.Environ(), childEnv+"=1"),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbsd init: starting the daemon: %v\n", err)
		return exitError
	}
	pid := child.Pid
	go func() {
		for s := range sigs {
			_ = syscall.Kill(pid, s.(syscall.Signal))
		}
	}()
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			// ECHILD: nothing left to wait for, the daemon included.
			return exitError
		}
		if got != pid {
			continue
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus()
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
	}
}
