// Package sandbox holds the domain types shared by the control plane and the
// providers that create sandboxes (docker, local): what to create, what exists,
// and what happened to it, and the rules both apply to what a client asks
// for (CheckName, WorkspacePolicy).
//
// It must never talk to a provider or the network itself: providers implement
// the control plane's Provider interface with these types. It also holds
// the two helpers every host-side provider shares to touch what a sandbox
// can write: directories resolved without following links (hostfs.go), and
// the one way to connect to a daemon's Unix socket in such a directory,
// which checks who answers (dial.go).
package sandbox

import (
	"strconv"
	"time"
)

// Labels every provider puts on what it creates, so that a restarted control
// plane can re-adopt its sandboxes and remove only its own orphans.
const (
	LabelManaged  = "limbs.managed"  // always "true"
	LabelInstance = "limbs.instance" // id of the control plane that created it
	LabelSandbox  = "limbs.sandbox"  // sandbox id
)

// Spec is everything a provider needs to create one sandbox.
type Spec struct {
	ID           string // sb_...
	Name         string
	Image        string
	Instance     string // control plane instance id, for labels
	Cpus         float64
	MemoryMB     int64
	Pids         int64
	Network      Network // NetworkNone or NetworkBridge
	Env          map[string]string
	Workspace    string // volume name or host dir; empty: a fresh volume
	User         string // default "1000:1000"
	ReadOnlyRoot bool
	TmpMB        int64
	// Bounds of the output limbsd keeps on disk (--max-disk,
	// --max-session-disk), in MiB; 0: limbsd's defaults.
	MaxDiskMB        int64
	MaxSessionDiskMB int64
	// Token is limbsd's bearer token.
	Token string
	// WorkspaceLower, with a fresh workspace (Workspace empty), is a host
	// directory the new workspace starts as a copy-on-write view of (an
	// overlay with it as the read-only lower layer): a fork's checkpoint
	// tree (cpstore.Store.Tree). Only the docker provider takes it.
	WorkspaceLower string
	// Nothing here is a host path: how limbsd gets into the sandbox, where
	// it listens and where it keeps its state are the provider's (its own
	// options), and so is the way to reach it (the provider's Dial).
}

// DiskFlags are the limbsd flags of the spec's disk bounds.
func (s Spec) DiskFlags() []string {
	var f []string
	if s.MaxDiskMB > 0 {
		f = append(f, "--max-disk", strconv.FormatInt(s.MaxDiskMB, 10)+"MiB")
	}
	if s.MaxSessionDiskMB > 0 {
		f = append(f, "--max-session-disk", strconv.FormatInt(s.MaxSessionDiskMB, 10)+"MiB")
	}
	return f
}

// State of a sandbox as a provider sees it.
type State struct {
	Running  bool
	ExitCode int
	// Reason is set when the sandbox stopped on its own: oom_killed,
	// daemon_exited, killed, ...
	Reason    string
	StartedAt time.Time
}

// Instance is one sandbox a provider knows about.
type Instance struct {
	ID         string // sandbox id (sb_...)
	ProviderID string // container id, process id, ...
	Labels     map[string]string
	State      State
}

// Event is something that happened to a sandbox outside the control plane's
// own calls (found through Docker events, a process exit, ...).
type Event struct {
	ID     string // sandbox id
	Kind   EventKind
	Reason string
	Time   time.Time
}
