package shell

import "github.com/limbs-dev/limbs/internal/wire"

// emulator is what a session needs of a terminal emulator: package screen
// provides it.
type emulator interface {
	Write(p []byte)
	Resize(cols, rows int)
	Snapshot() wire.Screen
	Close()
}

var newEmulator = func(cols, rows int) emulator { return &nullEmulator{cols: cols, rows: rows} }

type nullEmulator struct{ cols, rows int }

func (e *nullEmulator) Write(p []byte)        {}
func (e *nullEmulator) Resize(cols, rows int) { e.cols, e.rows = cols, rows }
func (e *nullEmulator) Snapshot() wire.Screen { return wire.Screen{Cols: e.cols, Rows: e.rows} }
func (e *nullEmulator) Close()                {}
