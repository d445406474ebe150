// Package vt is a virtual terminal emulator that can be used to emulate a
// modern terminal application.
package vt
