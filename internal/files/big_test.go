package files_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/testbin"
)

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

// peakRSS is the process's high-water mark of resident memory, in bytes
// (VmHWM), or -1 when /proc cannot tell.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	return parseHWM(string(b))
}

func parseHWM(status string) int64 {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
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

// TestGigabyteRoundTripInProcess is TestGigabyteRoundTrip without a
// daemon: the server runs in the test process, and the peak RSS measured
// is that of server and client together. It is a diagnostic for when
// limbsd cannot be built, so it runs only with LIMBS_BIG=1.
func TestGigabyteRoundTripInProcess(t *testing.T) {
	if os.Getenv("LIMBS_BIG") != "1" {
		t.Skip("diagnostic twin of TestGigabyteRoundTrip; set LIMBS_BIG=1 to run it")
	}
	const size = 1 << 30
	const limit = 64 << 20
	f := newFixture(t)
	if !resetPeakRSS() {
		t.Log("cannot reset VmHWM (/proc/self/clear_refs); the peak includes what came before")
	}

	putGet(t, f.c, size)
	peak := peakRSS()
	t.Logf("1 GiB round trip: peak RSS of the whole test process %.1f MiB (limit %d MiB; race detector %v)",
		float64(peak)/(1<<20), limit>>20, raceEnabled)
	if peak > limit && !raceEnabled {
		t.Errorf("peak RSS %.1f MiB over %d MiB: something buffers the file", float64(peak)/(1<<20), limit>>20)
	}
	os.Remove(f.path("big.bin"))
}

// TestGigabyteRoundTrip is acceptance 2: it builds and starts the real
// limbsd, sends it 1 GiB of pseudo-random bytes through PUT and reads them
// back through GET over its Unix socket, byte-exact, and checks that the
// daemon's peak RSS (VmHWM of its process) stays under 64 MiB.
func TestGigabyteRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 2 GiB through disk and HTTP; skipped under -short")
	}
	const size = 1 << 30
	const limit = 64 << 20
	d := startLimbsd(t)
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", d.pid), []byte("5"), 0); err != nil {
		t.Logf("cannot reset the daemon's VmHWM (%v); the peak includes its start", err)
	}

	putGet(t, d.c, size)
	peak := procPeakRSS(d.pid)
	t.Logf("1 GiB PUT+GET through limbsd: its peak RSS %.1f MiB (limit %d MiB)", float64(peak)/(1<<20), limit>>20)
	if peak < 0 {
		t.Fatalf("cannot read VmHWM of limbsd (pid %d)", d.pid)
	}
	if peak > limit {
		t.Errorf("limbsd peak RSS %.1f MiB over %d MiB: something buffers the file", float64(peak)/(1<<20), limit>>20)
	}
}

// putGet writes size pseudo-random bytes to big.bin through c and reads
// them back, byte-exact (sha256 of both ways).
func putGet(t *testing.T, c *client.Client, size int64) {
	t.Helper()
	ctx := context.Background()
	up := sha256.New()
	src := io.TeeReader(io.LimitReader(newBlockReader(), size), up)
	if _, err := c.WriteFile(ctx, "big.bin", src, 0, ""); err != nil {
		t.Fatal(err)
	}
	rc, err := c.ReadFile(ctx, "big.bin")
	if err != nil {
		t.Fatal(err)
	}
	down := sha256.New()
	n, err := io.Copy(down, rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if n != size {
		t.Fatalf("read back %d bytes, want %d", n, size)
	}
	if got, want := hex.EncodeToString(down.Sum(nil)), hex.EncodeToString(up.Sum(nil)); got != want {
		t.Fatalf("sha256 of what came back %s, of what went up %s", got, want)
	}
}

type daemon struct {
	pid int
	c   *client.Client
}

// startLimbsd runs cmd/limbsd, built as shipped, on a Unix socket; it is
// stopped when the test ends.
func startLimbsd(t *testing.T) *daemon {
	t.Helper()
	l := testbin.StartLimbsd(t, false)
	c, err := client.New("unix://"+l.Sock, l.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	return &daemon{pid: l.PID, c: c}
}

// procPeakRSS is VmHWM of process pid in bytes, or -1.
func procPeakRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	return parseHWM(string(b))
}
