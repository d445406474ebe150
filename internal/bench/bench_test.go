package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/testbin"

	"github.com/creack/pty"
	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

// daemon starts the real limbsd binary (built once per run) on a Unix
// socket, as a separate process as in a sandbox, and returns a client and a
// session id. LIMBS_BENCH_GOMAXPROCS sets the daemon's GOMAXPROCS.
func daemon(b *testing.B) (*client.Client, string) {
	b.Helper()
	bin := limbsdBinary(b)
	dir := b.TempDir()
	sock := filepath.Join(dir, "limbsd.sock")
	cmd := exec.Command(bin, "--listen", "unix://"+sock, "--token", "t", "--workdir", dir, "--state-dir", filepath.Join(dir, "state"), "--log-level", "error")
	cmd.Env = os.Environ()
	if v := os.Getenv("LIMBS_BENCH_GOMAXPROCS"); v != "" {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+v)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	c, err := client.New("unix://"+sock, "t", "")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; ; i++ {
		if _, err := c.Health(ctx); err == nil {
			break
		} else if i > 200 {
			b.Fatalf("limbsd did not answer: %v", err)
		}
		time.Sleep(25 * time.Millisecond)
	}
	s, err := c.CreateSession(ctx, wire.CreateSession{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	return c, s.ID
}

// limbsdBinary is cmd/limbsd as shipped.
func limbsdBinary(b *testing.B) string { return testbin.Path(b, "limbsd", false) }

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

func p50(d []time.Duration) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkRoundTrip: `true` through the HTTP API over a Unix socket, next
// to the floor, a line bounced through `cat` on a raw PTY.
func BenchmarkRoundTrip(b *testing.B) {
	c, id := daemon(b)
	ctx := context.Background()
	zero := 0.0
	for range 20 { // warm up
		if _, err := c.Exec(ctx, id, wire.Exec{Command: "true", YieldAfter: &zero}); err != nil {
			b.Fatal(err)
		}
	}
	ptmx, stop := startPTY(b, "cat")
	defer stop()
	line := []byte("ping\n")
	buf := make([]byte, 4096)
	pingpong := func() {
		ptmx.Write(line)
		// The echo and cat's copy: two lines.
		got := 0
		for got < 2 {
			n, err := ptmx.Read(buf)
			if err != nil {
				b.Fatal(err)
			}
			got += bytes.Count(buf[:n], []byte("\n"))
		}
	}
	api := make([]time.Duration, 0, b.N)
	raw := make([]time.Duration, 0, b.N)
	hops := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if _, err := c.GetSession(ctx, id); err != nil {
			b.Fatal(err)
		}
		hops = append(hops, time.Since(t0))
		t0 = time.Now()
		r, err := c.Exec(ctx, id, wire.Exec{Command: "true", YieldAfter: &zero})
		api = append(api, time.Since(t0))
		if err != nil || r.Status != wire.StatusExited || *r.ExitCode != 0 {
			b.Fatalf("exec true: %+v %v", r, err)
		}
		t0 = time.Now()
		pingpong()
		raw = append(raw, time.Since(t0))
	}
	b.StopTimer()
	a, f, h := p50(api), p50(raw), p50(hops)
	b.ReportMetric(ms(h), "http-get-p50-ms")
	b.ReportMetric(ms(a), "api-p50-ms")
	b.ReportMetric(ms(f), "pty-floor-p50-ms")
	b.ReportMetric(float64(a)/float64(f), "api/floor")
	b.ReportMetric(0, "ns/op")
	fmt.Printf("round trip of `true`: limbsd API over unix socket p50 %.3f ms; raw PTY ping-pong p50 %.3f ms; ratio %.1fx; (an HTTP GET of the session: %.3f ms) (n=%d)\n", ms(a), ms(f), float64(a)/float64(f), ms(h), b.N)
}

func startPTY(b *testing.B, script string) (*os.File, func()) {
	cmd := exec.Command("bash", "-c", script)
	ptmx, err := pty.Start(cmd)
	if err != nil {
		b.Fatal(err)
	}
	return ptmx, func() {
		ptmx.Close()
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
}

// producer writes 50 MiB of text lines in large blocks.
const (
	outputSize = 50 << 20
	producer   = "yes 'the quick brown fox jumps over the lazy dog 0123456789 the quick brown fox' | head -c 52428800"
)

// BenchmarkThroughput: 50 MiB of output through a limbs command, next to
// the same producer read by a bare PTY read loop.
func BenchmarkThroughput(b *testing.B) {
	c, id := daemon(b)
	ctx := context.Background()
	zero := 0.0
	var api, raw time.Duration
	for range b.N {
		t0 := time.Now()
		ptmx, stop := startPTY(b, producer)
		n, err := io.Copy(io.Discard, ptmx)
		if err != nil && !errors.Is(err, syscall.EIO) {
			var pe *os.PathError
			if !errors.As(err, &pe) {
				b.Fatal(err)
			}
		}
		raw += time.Since(t0)
		stop()
		if n < outputSize {
			b.Fatalf("raw loop read %d bytes", n)
		}
		t0 = time.Now()
		r, err := c.Exec(ctx, id, wire.Exec{Command: producer, YieldAfter: &zero})
		api += time.Since(t0)
		if err != nil || r.Status != wire.StatusExited || r.OutputBytes < outputSize {
			b.Fatalf("exec: %+v %v", r.OutputBytes, err)
		}
	}
	mib := float64(outputSize) / (1 << 20) * float64(b.N)
	a, f := mib/api.Seconds(), mib/raw.Seconds()
	b.ReportMetric(a, "api-MiB/s")
	b.ReportMetric(f, "raw-pty-MiB/s")
	b.ReportMetric(a/f, "api/raw")
	b.ReportMetric(0, "ns/op")
	fmt.Printf("throughput of 50 MiB: limbs exec %.1f MiB/s; raw PTY read loop %.1f MiB/s; ratio %.2f (n=%d)\n", a, f, a/f, b.N)
}
