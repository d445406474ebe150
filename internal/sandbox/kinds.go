package sandbox

// Network is the network a provider attaches a sandbox to (Spec.Network).
type Network string

// Networks every provider knows.
const (
	NetworkNone   Network = "none"   // loopback only
	NetworkBridge Network = "bridge" // the provider's outbound network
)

// EventKind is the kind of an Event a provider reports.
type EventKind string

// Kinds of Event.
const (
	EventStarted EventKind = "started" // the sandbox (re)started
	EventDied    EventKind = "died"    // the sandbox stopped; Reason says why
	EventOOM     EventKind = "oom"     // a process was OOM-killed; the sandbox may live on
	EventRemoved EventKind = "removed" // the sandbox was removed
	// EventResync (with no ID) says the provider's event stream broke and
	// is back: what happened meanwhile may be lost, so the receiver should
	// compare its sandboxes with List and Inspect.
	EventResync EventKind = "resync"
)
