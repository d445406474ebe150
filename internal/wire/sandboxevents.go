package wire

import "time"

// Network is the network a sandbox is attached to (CreateSandbox.Network,
// Limits.Network).
type Network string

// Networks a sandbox can have.
const (
	// NetworkNone: loopback only (the default).
	NetworkNone Network = "none"
	// NetworkBridge: the provider's outbound network (Docker's default
	// bridge, the host's network for a local sandbox).
	NetworkBridge Network = "bridge"
)

// EventKind is the kind of an entry of a sandbox's lifecycle log.
type EventKind string

// Kinds of SandboxEvent.
const (
	EventCreated        EventKind = "created"         // the sandbox was created (Message: warm pool notes)
	EventClaimed        EventKind = "claimed"         // a warm pool sandbox was taken by a client
	EventStopped        EventKind = "stopped"         // stopped on request
	EventStarted        EventKind = "started"         // started on request
	EventDied           EventKind = "died"            // stopped on its own; Reason says why
	EventOOM            EventKind = "oom"             // a process was killed for memory; the sandbox may live on
	EventRecovered      EventKind = "recovered"       // brought back after it died or the control plane restarted
	EventRecoveryFailed EventKind = "recovery_failed" // could not be brought back; Message says why
	EventAdopted        EventKind = "adopted"         // found running after the control plane restarted
	EventMissing        EventKind = "missing"         // the provider no longer has it
)

// SandboxEvent is one entry of a sandbox's lifecycle log.
type SandboxEvent struct {
	// Seq numbers the entries of one log from 1, in order.
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Kind    EventKind `json:"kind"`
	Reason  string    `json:"reason,omitempty"`
	Message string    `json:"message,omitempty"`
}

// SandboxEventList is the body of GET /v1/sandboxes/{id}/events.
type SandboxEventList struct {
	Events []SandboxEvent `json:"events"`
}
