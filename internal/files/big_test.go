package files_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

// peakRSS is the process's high-water mark of resident memory, in bytes
// (VmHWM), or -1 when /proc cannot tell.
func peakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return -1
			}
			return kb << 10
		}
	}
	return -1
}

// resetPeakRSS returns freed memory to the OS and restarts VmHWM from the
// current RSS.
func resetPeakRSS() bool {
	debug.FreeOSMemory()
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// blockReader yields an endless deterministic pseudo-random stream: one
// random MiB, repeated, each repetition stamped with its index so that a
// block lost, doubled or reordered changes the checksum. Generating the
// random bytes once keeps the test's own CPU out of the measurement.
type blockReader struct {
	block []byte
	off   int
	n     uint64
}

func newBlockReader() *blockReader {
	b := make([]byte, 1<<20)
	_, _ = rand.NewChaCha8([32]byte{1, 2, 3}).Read(b)
	return &blockReader{block: b}
}

func (r *blockReader) Read(p []byte) (int, error) {
	if r.off == 0 {
		binary.LittleEndian.PutUint64(r.block, r.n)
		r.n++
	}
	n := copy(p, r.block[r.off:])
	r.off = (r.off + n) % len(r.block)
	return n, nil
}

// TestGigabyteRoundTrip is acceptance 2: 1 GiB of pseudo-random bytes goes
// up through PUT and back through GET over real HTTP, byte-exact, while the
// process (server and client both, in-process) stays under 64 MiB of RSS.
// It measures the whole test process, so the daemon alone uses less.
func TestGigabyteRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 2 GiB through disk and HTTP; skipped under -short")
	}
	if raceEnabled && os.Getenv("LIMBS_BIG") != "1" {
		t.Skip("takes ~40 s under the race detector, whose memory hides the daemon's; run without -race, or set LIMBS_BIG=1")
	}
	const size = 1 << 30
	const limit = 64 << 20
	f := newFixture(t)
	if !resetPeakRSS() {
		t.Log("cannot reset VmHWM (/proc/self/clear_refs); the peak includes what came before")
	}
	ctx := context.Background()

	up := sha256.New()
	src := io.TeeReader(io.LimitReader(newBlockReader(), size), up)
	if _, err := f.c.WriteFile(ctx, "big.bin", src, 0, ""); err != nil {
		t.Fatal(err)
	}
	rc, err := f.c.ReadFile(ctx, "big.bin")
	if err != nil {
		t.Fatal(err)
	}
	down := sha256.New()
	n, err := io.Copy(down, rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	peak := peakRSS()
	if n != size {
		t.Fatalf("read back %d bytes, want %d", n, size)
	}
	if got, want := hex.EncodeToString(down.Sum(nil)), hex.EncodeToString(up.Sum(nil)); got != want {
		t.Fatalf("sha256 of what came back %s, of what went up %s", got, want)
	}
	t.Logf("1 GiB round trip: peak RSS of the whole test process %.1f MiB (limit %d MiB; race detector %v)",
		float64(peak)/(1<<20), limit>>20, raceEnabled)
	if peak > limit && !raceEnabled {
		t.Errorf("peak RSS %.1f MiB over %d MiB: something buffers the file", float64(peak)/(1<<20), limit>>20)
	}
	os.Remove(f.path("big.bin"))
}
