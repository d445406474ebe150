// Package bench holds the benchmarks that put limbs next to its baselines,
// measured in the same run and printed as ratios: the round trip of a
// command through limbsd's HTTP API against a raw PTY ping-pong, and output
// throughput against a raw PTY read loop.
//
// It must never assert a duration: numbers are reported, not tested.
package bench
