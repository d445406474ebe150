package shell

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A mapped ring (newRing) costs the pages output reached: an idle
// session's, one page; after 12 MiB of output, the newest 8 MiB (API.md)
// are in memory, byte for byte.
func TestStreamRingMapped(t *testing.T) {
	s, err := openStream(filepath.Join(t.TempDir(), "out"), &diskPool{}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.file.Close()
	if len(s.ring) != ringSize {
		t.Fatalf("the ring has %d bytes; want a mapping of %d", len(s.ring), ringSize)
	}
	s.append([]byte("hi"))
	if n := residentPages(t, s.ring); n != 1 {
		t.Errorf("an idle stream's ring has %d pages in memory; want 1", n)
	}
	fillAndCheck(t, s)
	if n, all := residentPages(t, s.ring), ringSize/os.Getpagesize(); n != all {
		t.Errorf("a full ring has %d of its %d pages in memory", n, all)
	}
}

// residentPages counts the pages of b in memory.
func residentPages(t *testing.T, b []byte) int {
	t.Helper()
	vec := make([]byte, (len(b)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// Without a mapping, the ring starts small (an idle session must not
// cost 8 MiB of heap) and grows before it loses a byte: after 12 MiB of
// output, the newest 8 MiB (API.md) are in memory, byte for byte, across
// every size it grew through.
func TestStreamRingGrowsToKeep8MiB(t *testing.T) {
	mappedRings = false
	defer func() { mappedRings = true }()
	s, err := openStream(filepath.Join(t.TempDir(), "out"), &diskPool{}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.file.Close()
	s.append([]byte("hi"))
	if n := len(s.ring); n > ringMin {
		t.Fatalf("an idle stream holds a %d-byte ring, want at most %d", n, ringMin)
	}
	fillAndCheck(t, s)
}

// fillAndCheck writes 12 MiB to s and reads the newest 8 MiB back from
// its ring.
func fillAndCheck(t *testing.T, s *stream) {
	t.Helper()
	byteAt := func(off int64) byte { return byte(off*7 + off/251) }
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

// A closed stream's mapping is unmapped within seconds of the stream's
// last reference going, also when nothing else makes the heap grow.
func TestStreamRingUnmappedAfterClose(t *testing.T) {
	s, err := openStream(filepath.Join(t.TempDir(), "out"), &diskPool{}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("%x-", uintptr(unsafe.Pointer(&s.ring[0])))
	mapped := func() bool {
		b, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, addr) {
				return true
			}
		}
		return false
	}
	if !mapped() {
		t.Fatalf("the ring at %s is not in /proc/self/maps", addr)
	}
	s.append(bytes.Repeat([]byte("x"), 1<<20))
	s.close()
	s = nil
	deadline := time.Now().Add(10 * time.Second)
	for mapped() {
		if time.Now().After(deadline) {
			t.Fatal("the closed stream's ring is still mapped after 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
