package main

import (
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/limbs-dev/limbs/internal/shell"
)

// A root limbsd whose agent is root too (--user root, 0, or any name the
// image maps to uid 0) runs as the agent's own user, without the
// capabilities a provider gives it to manage another user's processes
// (docs/docker.md): a root shell would otherwise inherit CAP_CHOWN,
// CAP_DAC_OVERRIDE, CAP_SYS_PTRACE and the others.
//
// Capabilities are per thread, and with cgo Go cannot change them on all
// threads; so limbsd drops them on one locked thread, sets no_new_privs
// there (root regains its bounding set on exec otherwise), and executes
// itself again from it: the new image starts with that thread's
// credentials on every thread.

// errRootAgentReexec: limbsd must execute itself again without its
// capabilities (see reexecWithoutCaps).
var errRootAgentReexec = errors.New("a root agent: limbsd executes itself again without capabilities")

// reexecEnv marks limbsd executed again by reexecWithoutCaps, so that it
// never does so twice.
const reexecEnv = "LIMBSD_CAPS_DROPPED"

// rootAgent handles a root agent's identity: nil once limbsd holds no
// capability and has the agent's groups, else errRootAgentReexec.
func rootAgent(id *shell.Identity) error {
	again := errRootAgentReexec
	if os.Getenv(reexecEnv) != "" {
		os.Unsetenv(reexecEnv)
		again = errors.New("limbsd still holds capabilities or lacks no_new_privs after dropping them; run a root agent's limbsd without capabilities")
	}
	if id.GID != os.Getegid() {
		return again
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("reading limbsd's capabilities: %w", err)
	}
	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	if err != nil {
		return fmt.Errorf("reading no_new_privs: %w", err)
	}
	for _, d := range data {
		if d.Permitted|d.Effective|d.Inheritable != 0 {
			return again
		}
	}
	if nnp != 1 {
		return again
	}
	return nil
}

// reexecWithoutCaps takes id's groups, drops every capability, sets
// no_new_privs and executes limbsd again with env. It returns only on
// failure.
func reexecWithoutCaps(id *shell.Identity, env []string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding limbsd's executable: %w", err)
	}
	goruntime.LockOSThread() // for good: this thread's credentials are the new image's
	if id.GID != os.Getegid() {
		if err := unix.Setgroups(id.Groups); err != nil {
			return fmt.Errorf("taking the agent's groups: %w", err)
		}
		if err := unix.Setresgid(id.GID, id.GID, id.GID); err != nil {
			return fmt.Errorf("taking the agent's gid %d: %w", id.GID, err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("setting no_new_privs: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("dropping limbsd's capabilities: %w", err)
	}
	return syscall.Exec(exe, os.Args, append(env, reexecEnv+"=1"))
}
