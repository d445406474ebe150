package wire

import "time"

// SessionState is what a checkpoint keeps of one session: enough to start
// a shell like it again (its cwd and exported environment), never its
// processes. Env is the session's saved environment, a script of
// `declare -x` lines the new shell sources; it is the sandbox's own text
// and only ever handed back to a shell of a sandbox.
type SessionState struct {
	ID    string            `json:"id"`
	Name  string            `json:"name"`
	Cwd   string            `json:"cwd"`
	Shell string            `json:"shell,omitempty"`
	Cols  int               `json:"cols,omitempty"`
	Rows  int               `json:"rows,omitempty"`
	Vars  map[string]string `json:"vars,omitempty"` // the create's env
	Env   string            `json:"env,omitempty"`
}

// CreateCheckpoint is the body of POST /v1/sandboxes/{id}/checkpoints.
type CreateCheckpoint struct {
	Name  string   `json:"name,omitempty"`
	Paths []string `json:"paths,omitempty"`
	// TTL (extension) is how long the checkpoint is kept, in seconds; 0:
	// the control plane's --checkpoint-ttl.
	TTL float64 `json:"ttl,omitempty"`
}

// Checkpoint describes one checkpoint.
type Checkpoint struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	// Size is the bytes of every file the checkpoint holds; FrozenMS how
	// long the sandbox's processes were stopped to take it.
	Size     int64 `json:"size"`
	FrozenMS int64 `json:"frozen_ms"`
	// Extensions.
	Sandbox    string     `json:"sandbox"`
	Paths      []string   `json:"paths"`
	Files      int        `json:"files"`
	Dirs       int        `json:"dirs"`
	Symlinks   int        `json:"symlinks"`
	NewBytes   int64      `json:"new_bytes"` // bytes stored by this checkpoint alone
	Sent       int64      `json:"sent_bytes"`
	DurationMS int64      `json:"duration_ms"`
	StopMS     int64      `json:"stop_ms"` // of frozen_ms: stopping the processes
	WalkMS     int64      `json:"walk_ms"` // of frozen_ms: the walk
	Sessions   int        `json:"sessions"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
}

// CheckpointList is the answer of GET /v1/sandboxes/{id}/checkpoints.
type CheckpointList struct {
	Checkpoints []Checkpoint `json:"checkpoints"`
}

// Restored is the answer of POST .../checkpoints/{cp}/restore.
type Restored struct {
	Checkpoint string   `json:"checkpoint"`
	Written    int      `json:"written"`
	Removed    int      `json:"removed"`
	Bytes      int64    `json:"bytes"`
	FrozenMS   int64    `json:"frozen_ms"`
	DurationMS int64    `json:"duration_ms"`
	Sessions   []string `json:"sessions"`
}

// Diff is the answer of GET .../checkpoints/{a}/diff?to=b|current.
type Diff struct {
	From    string   `json:"from"`
	To      string   `json:"to"`
	Added   []string `json:"added"`
	Changed []string `json:"changed"`
	Removed []string `json:"removed"`
	Diff    string   `json:"diff"`
}

// Fork is the body of POST /v1/sandboxes/{id}/fork.
type Fork struct {
	Count int `json:"count"`
	// Checkpoint (extension) forks from that checkpoint of the sandbox;
	// empty: a new checkpoint is taken first.
	Checkpoint string `json:"checkpoint,omitempty"`
}

// Forked is the answer of a fork.
type Forked struct {
	Sandboxes  []Sandbox `json:"sandboxes"`
	Checkpoint string    `json:"checkpoint"`
	// DiskBytes is what the fork wrote to disk: with Shared, the
	// checkpoint's files written out once as the forks' common read-only
	// layer (0 when an earlier fork made it), each fork then taking only
	// what it writes; without, a full copy of the files per fork.
	DiskBytes int64 `json:"disk_bytes"`
	// Shared: the forks' workspaces are copy-on-write views of one copy
	// of the checkpoint (docs/checkpoints.md "Forks").
	Shared bool `json:"shared,omitempty"`
	// FromPool counts the shared forks that were warm-pool sandboxes, with
	// the fork's workspace mounted over theirs (no container created).
	FromPool int `json:"from_pool,omitempty"`
	// Where DurationMS went: writing the shared tree out, and the slowest
	// fork's create (to its limbsd answering) and restore.
	TreeMS     int64 `json:"tree_ms,omitempty"`
	CreateMS   int64 `json:"create_ms"`
	RestoreMS  int64 `json:"restore_ms"`
	DurationMS int64 `json:"duration_ms"`
}
