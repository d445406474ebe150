// Package perf is what the modes of `limbs bench` share to measure limbs
// next to its baselines in one run: percentiles of samples (Summarize), a
// report of rows with their baselines and targets that prints as a table
// and reads and writes as JSON (Report, Row, Target, Compare), the machine
// the numbers were taken on (ReadMachine), the processes measured (a
// limbsd on a Unix socket: StartLimbsd; a `limbs serve` on loopback with
// its Docker sandboxes: StartServe, Serve.NewSandbox; their memory: RSS,
// CgroupMemory), and the baselines limbs is put next to (a raw PTY
// ping-pong and read loop, docker exec, tmux polled with capture-pane, a
// wait for silence).
//
// Everything it starts listens on loopback or a Unix socket, runs with
// --network none in Docker, is labelled limbs.managed=true, and is removed
// by the Close of what started it, with a context of its own so that an
// interrupted run still cleans up. Every loop is bounded in count and time.
// It must never assert a duration: numbers are reported, not tested.
package perf
