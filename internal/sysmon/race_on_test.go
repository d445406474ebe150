//go:build race

package sysmon

// raceEnabled: the race runtime wakes the process itself while it is
// idle, so an idle process says nothing of sysmon.
const raceEnabled = true
