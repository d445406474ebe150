package shell

import (
	"bytes"
	"path/filepath"
	"testing"
)

// The ring starts small (an idle session must not cost 8 MiB of heap) and
// grows before it loses a byte: after 12 MiB of output, the newest 8 MiB
// (API.md) are in memory, byte for byte, across every size it grew
// through.
func TestStreamRingGrowsToKeep8MiB(t *testing.T) {
	s, err := openStream(filepath.Join(t.TempDir(), "out"), &diskPool{}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.file.Close()
	byteAt := func(off int64) byte { return byte(off*7 + off/251) }
	s.append([]byte("hi"))
	if n := len(s.ring); n > ringMin {
		t.Fatalf("an idle stream holds a %d-byte ring, want at most %d", n, ringMin)
	}
	const total = 12 << 20
	chunk := make([]byte, 40<<10+3)
	for off := s.end; off < total; {
		n := min(int64(len(chunk)), total-off)
		for i := range n {
			chunk[i] = byteAt(off + i)
		}
		s.append(chunk[:n])
		off += n
	}
	s.mu.Lock()
	low, size := s.memLowLocked(), len(s.ring)
	s.mu.Unlock()
	if size != ringSize || low > s.end-ringSize {
		t.Fatalf("ring of %d bytes holding from %d of %d: want %d bytes holding the newest %d", size, low, s.end, ringSize, ringSize)
	}
	// Read it back from memory: the file may not serve it.
	if err := s.file.Truncate(0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, ringSize)
	from := s.end - ringSize
	if n, err := s.readAt(got, from); err != nil || n != ringSize {
		t.Fatalf("reading the newest 8 MiB: %d bytes, %v", n, err)
	}
	want := make([]byte, ringSize)
	for i := range want {
		want[i] = byteAt(from + int64(i))
	}
	if i := firstDiff(got, want); i >= 0 {
		t.Fatalf("byte at offset %d: got %d, want %d", from+int64(i), got[i], want[i])
	}
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return len(a)
}
