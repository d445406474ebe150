package shell

import (
	"github.com/limbs-dev/limbs/internal/screen"
	"github.com/limbs-dev/limbs/internal/wire"
)

// emulator is what a session needs of a terminal emulator (package screen
// provides it; tests may substitute their own).
type emulator interface {
	Write(p []byte)
	Resize(cols, rows int)
	Snapshot() wire.Screen
	Close()
}

var newEmulator = func(cols, rows int) emulator { return screen.NewEmulator(cols, rows) }
