// Package wire holds the JSON types of the limbs wire contract (docs/api.md)
// shared by limbsd, the control plane and every client, and the error
// vocabulary of that contract.
//
// It must never import anything that runs processes, touches files or speaks
// HTTP beyond encoding an error: it is the vocabulary, not the behaviour.
package wire

import "time"

// Version is reported by GET /v1/health.
const Version = "0.1.0"

// Health is the body of GET /v1/health.
type Health struct {
	Status  string `json:"status"`
	Version string `json:"version"`
}

// Session states.
const (
	StateIdle    = "idle"
	StateRunning = "running"
	StateExited  = "exited"
)

// CreateSession is the body of POST /v1/sessions. Every field is optional.
type CreateSession struct {
	Name  string            `json:"name,omitempty"`
	Cols  int               `json:"cols,omitempty"`
	Rows  int               `json:"rows,omitempty"`
	Cwd   string            `json:"cwd,omitempty"`
	Env   map[string]string `json:"env,omitempty"`
	Shell string            `json:"shell,omitempty"`
}

// Session describes one persistent shell.
type Session struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Cols      int       `json:"cols"`
	Rows      int       `json:"rows"`
	Cwd       string    `json:"cwd"`
	State     string    `json:"state"`
	Pid       int       `json:"pid"`
	CreatedAt time.Time `json:"created_at"`
	// Extensions.
	Shell    string `json:"shell,omitempty"`
	Restarts int    `json:"restarts"`
	// OutputOffset is the end of the session's output stream so far.
	OutputOffset int64 `json:"output_offset"`
}

// SessionList is the body of GET /v1/sessions.
type SessionList struct {
	Sessions []Session `json:"sessions"`
}

// Exec is the body of POST /v1/sessions/{id}/exec. Pointers distinguish
// "absent" (use the default) from an explicit zero.
type Exec struct {
	Command    string   `json:"command"`
	Timeout    float64  `json:"timeout,omitempty"`
	YieldAfter *float64 `json:"yield_after,omitempty"`
	MaxOutput  *int     `json:"max_output,omitempty"`
	// Until: return as soon as one of these conditions holds (until.go).
	Until *Until `json:"until,omitempty"`
}

// Wait is the body of POST /v1/sessions/{id}/wait.
type Wait struct {
	YieldAfter *float64 `json:"yield_after,omitempty"`
	MaxOutput  *int     `json:"max_output,omitempty"`
	Until      *Until   `json:"until,omitempty"`
}

// Input is the body of POST /v1/sessions/{id}/input.
type Input struct {
	Text       string   `json:"text,omitempty"`
	Keys       []string `json:"keys,omitempty"`
	YieldAfter *float64 `json:"yield_after,omitempty"`
	MaxOutput  *int     `json:"max_output,omitempty"`
	Until      *Until   `json:"until,omitempty"`
}

// Interrupt is the (optional) body of POST /v1/sessions/{id}/interrupt.
type Interrupt struct {
	MaxOutput *int `json:"max_output,omitempty"`
}

// Resize is the body of POST /v1/sessions/{id}/resize.
type Resize struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// Result statuses.
const (
	StatusExited      = "exited"
	StatusRunning     = "running"
	StatusTimeout     = "timeout"
	StatusInterrupted = "interrupted"
)

// Defaults of the exec family.
const (
	DefaultYieldAfter = 30.0
	DefaultMaxOutput  = 30000
)

// Result is what exec, wait, input and interrupt return.
type Result struct {
	CommandID       string `json:"command_id"`
	Status          string `json:"status"`
	ExitCode        *int   `json:"exit_code"`
	Output          string `json:"output"`
	Truncated       bool   `json:"truncated"`
	OutputBytes     int64  `json:"output_bytes"`
	LogPath         string `json:"log_path"`
	OffsetStart     int64  `json:"offset_start"`
	OffsetEnd       int64  `json:"offset_end"`
	Cwd             string `json:"cwd"`
	DurationMs      int64  `json:"duration_ms"`
	WaitingForInput bool   `json:"waiting_for_input"`
	// EchoOff is an extension: with WaitingForInput, the terminal does
	// not echo what is typed (a password or passphrase prompt).
	EchoOff bool `json:"echo_off,omitempty"`
	// BackgroundOutput is an extension: what the terminal showed between
	// the previous command's prompt and this command's start (background
	// jobs), cleaned; only in a command's first result. Between is its
	// range of the output stream.
	BackgroundOutput string  `json:"background_output,omitempty"`
	Between          []int64 `json:"between,omitempty"`
	// ShellExited is an extension: the shell itself ended during the command
	// (exit, exec, set -e, a kill). The next call gets a fresh shell with the
	// old cwd and exported environment.
	ShellExited bool `json:"shell_exited,omitempty"`
	// ShellReplaced is an extension: the command replaced the shell with
	// another one (exec bash, exec sh), which limbsd found at its prompt
	// and replaced with a fresh shell of its own in the cwd the command
	// left; exit_code is then null (the command never returned), and
	// shell_exited is true.
	ShellReplaced bool `json:"shell_replaced,omitempty"`
	// EndRecovered is an extension: the shell came back to its prompt
	// with no proven end of the command (its end marker or its message on
	// the end channel was lost: the user closed descriptor 251, removed
	// limbs' functions, or a trap skipped them), and limbsd ended the
	// command from the process state; exit_code is then the status the
	// shell's unproven end marker printed, or null when it printed none,
	// and cwd is the shell's from /proc. EndNote says what was lost and
	// what to do.
	EndRecovered bool   `json:"end_recovered,omitempty"`
	EndNote      string `json:"end_note,omitempty"`
	// ChunkStart is an extension: the stream offset where this result's
	// output begins (offset_start is where the command's output begins;
	// a running result returns only what is new).
	ChunkStart int64 `json:"chunk_start"`
	// Overwrite is an extension: the first line of output replaces the
	// last line of the previous result's output, which did not end in a
	// newline (a \r progress bar redrawn across results). Output then
	// holds that whole line as it stands now; chunk_start is where it
	// begins in the stream.
	Overwrite bool `json:"overwrite,omitempty"`
	// AltScreen is an extension: the command shows a full-screen program
	// (vim, less, top) on the terminal's alternate screen; output is then
	// the text of that screen as it is now (see GET .../screen), not the
	// bytes that drew it.
	AltScreen bool `json:"alt_screen,omitempty"`
	// Extensions on the command log (docs/api.md "State on disk"):
	// LogTruncated says the log was cut to its head and tail to keep the
	// session within its disk bound; LogIncomplete that writing it failed
	// (a full disk), with LogError saying why. LogMissing is then the
	// range [from, to) of the output stream the log does not hold: the
	// file holds offset_start..from, then to..offset_end.
	LogTruncated  bool    `json:"log_truncated,omitempty"`
	LogIncomplete bool    `json:"log_incomplete,omitempty"`
	LogMissing    []int64 `json:"log_missing,omitempty"`
	LogError      string  `json:"log_error,omitempty"`
	// Matched names the until condition that held (output, port, quiet,
	// screen) on a running result; absent when the call returned for
	// anything else, and on the result of an ended command (its end is
	// the stronger fact), but for port: a command that ended leaving
	// background processes (a server started with &) is waited for,
	// within the call's yield, until its port listens (docs/api.md). MatchedText is an extension: what held, as
	// text: the text the output or screen expression matched (at most
	// 200 characters), or the address listening on the port.
	Matched     string `json:"matched,omitempty"`
	MatchedText string `json:"matched_text,omitempty"`
	// Background is an extension, only in a command's final result: the
	// processes the command started that are still running after it
	// ended (sleep 100 &, nohup server &), at most ten;
	// BackgroundCount is how many there were.
	Background      []BackgroundProcess `json:"background,omitempty"`
	BackgroundCount int                 `json:"background_count,omitempty"`
}

// BackgroundProcess is one process a command left running. Command is
// its command line as the process set it (the sandbox writes it): clamped,
// with control characters made visible.
type BackgroundProcess struct {
	PID     int    `json:"pid"`
	Command string `json:"command"`
}

// Cursor is a position on the screen, zero-based.
type Cursor struct {
	Row int `json:"row"`
	Col int `json:"col"`
}

// Screen is the body of GET /v1/sessions/{id}/screen.
type Screen struct {
	Cols      int      `json:"cols"`
	Rows      int      `json:"rows"`
	Lines     []string `json:"lines"`
	Cursor    Cursor   `json:"cursor"`
	AltScreen bool     `json:"alt_screen"`
	Title     string   `json:"title"`
}

// AttachControl is a text message on the attach WebSocket.
type AttachControl struct {
	Type string `json:"type"`
	Cols int    `json:"cols,omitempty"`
	Rows int    `json:"rows,omitempty"`
}

// FileEntry is one row of GET /v1/files/list.
type FileEntry struct {
	Path  string    `json:"path"`
	Name  string    `json:"name"`
	Type  string    `json:"type"` // file, dir or symlink
	Size  int64     `json:"size"`
	Mode  string    `json:"mode"`
	Mtime time.Time `json:"mtime"`
	// Target is an extension: where a symlink points.
	Target string `json:"target,omitempty"`
}

// FileList is the body of GET /v1/files/list.
type FileList struct {
	Entries []FileEntry `json:"entries"`
}

// Edit is the body of POST /v1/files/edit.
type Edit struct {
	Command    string  `json:"command"`
	Path       string  `json:"path"`
	FileText   *string `json:"file_text,omitempty"`
	OldStr     *string `json:"old_str,omitempty"`
	NewStr     *string `json:"new_str,omitempty"`
	InsertLine *int    `json:"insert_line,omitempty"`
	ViewRange  []int   `json:"view_range,omitempty"`
	IfMatch    string  `json:"if_match,omitempty"`
}

// EditResult is the body of a successful POST /v1/files/edit.
type EditResult struct {
	Output string `json:"output"`
}

// WatchEvent is one event of GET /v1/files/watch.
type WatchEvent struct {
	Type string    `json:"type"` // create, write, remove, rename
	Path string    `json:"path"`
	Time time.Time `json:"time"`
	From string    `json:"from,omitempty"`
}

// Sandbox statuses.
const (
	SandboxCreating = "creating"
	SandboxRunning  = "running"
	SandboxStopped  = "stopped"
	SandboxFailed   = "failed"
)

// CreateSandbox is the body of POST /v1/sandboxes.
type CreateSandbox struct {
	Image     string            `json:"image,omitempty"`
	Provider  string            `json:"provider,omitempty"`
	Name      string            `json:"name,omitempty"`
	Cpus      float64           `json:"cpus,omitempty"`
	MemoryMB  int64             `json:"memory_mb,omitempty"`
	Pids      int64             `json:"pids,omitempty"`
	Network   Network           `json:"network,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Workspace string            `json:"workspace,omitempty"`
	// SecretEnv names entries of Env whose values are secret: the control
	// plane masks them ("***") in every event, log line and answer
	// (docs/events.md, "Secrets"). Each must name an entry of Env whose
	// value has at least 4 bytes.
	SecretEnv []string `json:"secret_env,omitempty"`
	// Extensions.
	User         string `json:"user,omitempty"`
	ReadOnlyRoot bool   `json:"read_only_root,omitempty"`
	TmpMB        int64  `json:"tmp_mb,omitempty"`
	// MaxDiskMB and MaxSessionDiskMB bound the command output limbsd keeps
	// on disk, for the whole sandbox and per session (limbsd --max-disk,
	// --max-session-disk); 0: limbs serve's default.
	MaxDiskMB        int64 `json:"max_disk_mb,omitempty"`
	MaxSessionDiskMB int64 `json:"max_session_disk_mb,omitempty"`
	// FromCheckpoint ("sb_.../cp_...") creates the sandbox like the one the
	// checkpoint was taken of (the fields set here win) and restores the
	// checkpoint into it (docs/checkpoints.md).
	FromCheckpoint string `json:"from_checkpoint,omitempty"`
}

// Limits are the resource limits a sandbox runs under.
type Limits struct {
	Cpus         float64 `json:"cpus"`
	MemoryMB     int64   `json:"memory_mb"`
	Pids         int64   `json:"pids"`
	Network      Network `json:"network"`
	TmpMB        int64   `json:"tmp_mb,omitempty"`
	ReadOnlyRoot bool    `json:"read_only_root"`
	User         string  `json:"user,omitempty"`
	// The disk bounds asked for at create (0: the control plane's default).
	MaxDiskMB        int64 `json:"max_disk_mb,omitempty"`
	MaxSessionDiskMB int64 `json:"max_session_disk_mb,omitempty"`
}

// Sandbox describes one sandbox managed by the control plane.
type Sandbox struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Provider  string    `json:"provider"`
	Image     string    `json:"image"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
	Limits    Limits    `json:"limits"`
	// Extensions: why the sandbox failed or was last recovered
	// (oom_killed, daemon_exited, ...), and a human sentence.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// SandboxList is the body of GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}
