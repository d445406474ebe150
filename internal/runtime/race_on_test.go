//go:build race

package runtime_test

// raceEnabled: the tests run under -race, so the limbsd they build does too.
const raceEnabled = true
