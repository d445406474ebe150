package wire

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
