//go:build !race

package files_test

const raceEnabled = false
