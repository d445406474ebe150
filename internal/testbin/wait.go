package testbin

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// Buffer collects what a process or a relay writes while the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Eventually waits for cond, which a process or a goroutine reaches in the
// background. within only keeps a broken build from hanging the test: it is
// a bound, never a measurement.
func Eventually(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never happened within %s: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
