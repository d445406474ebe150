//go:build race

package files_test

// raceEnabled says the race detector runs, whose shadow memory makes the
// process's RSS say nothing about the daemon's own.
const raceEnabled = true
