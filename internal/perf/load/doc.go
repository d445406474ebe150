// Package load is limbs' proof at scale: the load test, the fault run, the
// soak and the density run of `limbs bench load|faults|soak|density`.
//
// Each run starts its own `limbs serve` as a child process on a Unix
// socket in a temporary state dir, drives it only through the HTTP API
// (internal/client), injects faults only into what it created (its own
// serve by PID, its own containers by name, their limbsd by the PID the
// engine reports), and removes everything it made however it ends: the
// sandboxes through the API, then whatever the engine still lists with
// the run's instance label.
//
// Concurrency: Run starts one goroutine per client, one fault injector
// and one sampler; each client owns its session and its records, the
// shared tallies are behind run.mu. Nothing here is imported by limbs
// itself, and it must never talk to an address other than its own
// serve's socket, nor touch a container or process it did not create.
package load
