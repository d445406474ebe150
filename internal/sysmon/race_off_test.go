//go:build !race

package sysmon

const raceEnabled = false
