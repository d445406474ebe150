package wire

import (
	"encoding/json"
	"time"
)

// EventsVersion is the version of the Event envelope and of the data of
// its types (docs/events.md). A change that a reader of version 1 could
// misread raises it; new types and new data fields do not.
const EventsVersion = 1

// EventType names what an Event records: a dotted noun.
type EventType string

// EventSource says who caused an Event.
type EventSource string

// Sources of an Event.
const (
	SourceAPI      EventSource = "api"      // a call to limbsd's or the control plane's API
	SourceTerminal EventSource = "terminal" // typed on an attached terminal
	SourceAgent    EventSource = "agent"    // limbs' own agent loop
	SourceSystem   EventSource = "system"   // limbs itself (a shell died, a sandbox was recovered)
)

// Event types. Data of each is the struct named in its comment.
const (
	// Sandbox lifecycle (control plane): SandboxData.
	EventSandboxCreated        EventType = "sandbox.created"
	EventSandboxClaimed        EventType = "sandbox.claimed"
	EventSandboxStarted        EventType = "sandbox.started"
	EventSandboxStopped        EventType = "sandbox.stopped"
	EventSandboxDied           EventType = "sandbox.died"
	EventSandboxOOM            EventType = "sandbox.oom"
	EventSandboxRecovered      EventType = "sandbox.recovered"
	EventSandboxRecoveryFailed EventType = "sandbox.recovery_failed"
	EventSandboxAdopted        EventType = "sandbox.adopted"
	EventSandboxMissing        EventType = "sandbox.missing"
	EventSandboxDeleted        EventType = "sandbox.deleted"
	// Checkpoints (docs/checkpoints.md); data is CheckpointData.
	EventCheckpointCreated  EventType = "checkpoint.created"
	EventCheckpointRestored EventType = "checkpoint.restored"
	EventCheckpointDeleted  EventType = "checkpoint.deleted"
	EventSandboxForked      EventType = "sandbox.forked"
	// An API call on the control plane: APICallData.
	EventAPICall EventType = "api.call"

	// Sessions (limbsd): SessionData.
	EventSessionCreated   EventType = "session.created"
	EventSessionRestarted EventType = "session.restarted"
	EventSessionExited    EventType = "session.exited" // the shell ended; Reason says why
	EventSessionClosed    EventType = "session.closed"
	EventSessionResized   EventType = "session.resized"

	// Commands (limbsd).
	EventCommandStarted  EventType = "command.started"  // CommandStartedData
	EventCommandFinished EventType = "command.finished" // CommandFinishedData
	EventCommandWaiting  EventType = "command.waiting"  // WaitingData: waiting for input began or ended
	EventCommandSignal   EventType = "command.signal"   // SignalData: interrupt or timeout escalation, one per signal sent

	// Output of a session's terminal: OutputData. limbsd's journal
	// records offsets and times (the timing index); the control plane's
	// log also stores the bytes.
	EventOutput EventType = "output"

	// Input typed into a session: InputData (masked while echo is off).
	EventInput EventType = "input"

	// Files: FileData. Written, edited and deleted through the Files API;
	// changed under the workspace by a command (the file watcher).
	EventFileWritten EventType = "file.written"
	EventFileEdited  EventType = "file.edited"
	EventFileDeleted EventType = "file.deleted"
	EventFileChanged EventType = "file.changed"

	// A reader fell behind or a log lost entries: GapData. The next event
	// has Seq GapData.To.
	EventGap EventType = "log.gap"

	// The agent loop (source agent); data defined with the agent.
	EventAgentRequest     EventType = "agent.request"
	EventAgentMessage     EventType = "agent.message"
	EventAgentToolCall    EventType = "agent.tool_call"
	EventAgentObservation EventType = "agent.observation"
	EventAgentUsage       EventType = "agent.usage"
	EventAgentFinished    EventType = "agent.finished"
)

// Event is the one envelope of every event: limbsd's journal
// (GET /v1/events), the control plane's per-sandbox log
// (GET /v1/sandboxes/{id}/events, GET /v1/events) and exports.
type Event struct {
	// Seq increases by one per event within its log, from 1.
	Seq     uint64      `json:"seq"`
	Time    time.Time   `json:"time"`
	Sandbox string      `json:"sandbox,omitempty"`
	Session string      `json:"session,omitempty"`
	Command string      `json:"command,omitempty"`
	Type    EventType   `json:"type"`
	Source  EventSource `json:"source"`
	// Cause is the Seq of the event this one answers (a command.finished
	// answers its command.started), within the same log.
	Cause uint64          `json:"cause,omitempty"`
	Data  json.RawMessage `json:"data,omitempty"`
	// Cursor is the event's position in the control plane's stream across
	// all its sandboxes (GET /v1/events): from= that continues after it.
	// It increases with every event the control plane logs; limbsd's
	// journal leaves it out.
	Cursor uint64 `json:"cursor,omitempty"`
}

// EventList is the body of a GET .../events that does not follow.
type EventList struct {
	Events []Event `json:"events"`
	// Next is the from= that continues after the last event.
	Next uint64 `json:"next,omitempty"`
	// Journal is limbsd's journal id (JournalHeader); empty elsewhere.
	Journal string `json:"journal,omitempty"`
}

// SandboxData is the data of sandbox.* events.
type SandboxData struct {
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	Image   string `json:"image,omitempty"`
}

// APICallData is the data of api.call.
type APICallData struct {
	Method     string `json:"method"`
	Path       string `json:"path"`
	Status     int    `json:"status"`
	Caller     string `json:"caller,omitempty"` // remote address or token name
	DurationMs int64  `json:"duration_ms"`
}

// SessionData is the data of session.* events.
type SessionData struct {
	Name   string `json:"name,omitempty"`
	Cwd    string `json:"cwd,omitempty"`
	Reason string `json:"reason,omitempty"`
	Cols   int    `json:"cols,omitempty"`
	Rows   int    `json:"rows,omitempty"`
}

// CommandStartedData is the data of command.started.
type CommandStartedData struct {
	Text string `json:"text"`
	Cwd  string `json:"cwd,omitempty"`
	// Via is the call that started it: exec, input, attach.
	Via         string `json:"via"`
	OffsetStart int64  `json:"offset_start"`
}

// CommandFinishedData is the data of command.finished.
type CommandFinishedData struct {
	Status      string `json:"status"`
	ExitCode    *int   `json:"exit_code"`
	Signal      string `json:"signal,omitempty"`
	Cwd         string `json:"cwd,omitempty"`
	DurationMs  int64  `json:"duration_ms"`
	OffsetStart int64  `json:"offset_start"`
	OffsetEnd   int64  `json:"offset_end"`
	// Reason says why a command ended without its own end: the shell
	// died, limbsd died, it was recovered from process state.
	Reason string `json:"reason,omitempty"`
}

// WaitingData is the data of command.waiting.
type WaitingData struct {
	Waiting bool   `json:"waiting"`
	EchoOff bool   `json:"echo_off,omitempty"`
	Prompt  string `json:"prompt,omitempty"`
}

// SignalData is the data of command.signal.
type SignalData struct {
	Signal string `json:"signal"`
	Why    string `json:"why"` // interrupt, timeout, kill, close
}

// OutputData is the data of output: the bytes [Offset, Offset+Size) of a
// session's output stream, shown at the event's time. Bytes is filled
// in the control plane's log (JSON base64); limbsd's journal leaves it
// out.
type OutputData struct {
	Offset int64  `json:"offset"`
	Size   int64  `json:"size"`
	Bytes  []byte `json:"bytes,omitempty"`
}

// InputData is the data of input.
type InputData struct {
	Text string   `json:"text,omitempty"`
	Keys []string `json:"keys,omitempty"`
	// Masked: the terminal's echo was off, and Text is replaced with
	// as many '*' as it had bytes.
	Masked bool `json:"masked,omitempty"`
}

// FileData is the data of file.* events.
type FileData struct {
	Path   string `json:"path"`
	Kind   string `json:"kind,omitempty"` // file.changed: create, write, remove, rename
	From   string `json:"from,omitempty"`
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	Edit   string `json:"edit,omitempty"` // file.edited: the edit command
	// Running names the commands ("SESSION/COMMAND") running when the
	// file watcher saw a file.changed, when more than one ran (with one,
	// the event's session and command name it).
	Running []string `json:"running,omitempty"`
}

// GapData is the data of log.gap: events [From, To) are not in this
// answer (the reader fell behind the in-memory ring and they are no
// longer on disk, or the log was cut by its retention).
type GapData struct {
	From   uint64 `json:"from"`
	To     uint64 `json:"to"`
	Reason string `json:"reason"`
}

// StatusLost is the status of a command.finished that limbsd records for a
// command it cannot know the end of: the limbsd that ran it exited (Reason
// says so).
const StatusLost = "lost"

// JournalHeader names, in every answer of limbsd's GET /v1/events, the
// journal the events come from; a reader that sees another id than before
// reads a new journal (limbsd's state directory was wiped) whose sequence
// numbers start again at 1.
const JournalHeader = "Limbs-Journal"

// JournalInfo is the first line (the first SSE message, event: journal)
// of a followed GET /v1/events: which journal, and what it holds.
type JournalInfo struct {
	Journal string `json:"journal"`
	Version int    `json:"version"`
	// First is the oldest seq still readable, Next the seq of the next
	// event appended.
	First uint64 `json:"first"`
	Next  uint64 `json:"next"`
}

// CheckpointData is the data of checkpoint.* and sandbox.forked events.
type CheckpointData struct {
	Checkpoint string   `json:"checkpoint"`
	Name       string   `json:"name,omitempty"`
	Size       int64    `json:"size,omitempty"`
	FrozenMS   int64    `json:"frozen_ms,omitempty"`
	Written    int      `json:"written,omitempty"`
	Removed    int      `json:"removed,omitempty"`
	Sandboxes  []string `json:"sandboxes,omitempty"`
	From       string   `json:"from,omitempty"`
}
