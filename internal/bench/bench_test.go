package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/perf"
	"github.com/limbs-dev/limbs/internal/testbin"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

// daemon starts the real limbsd binary on a Unix socket, as a separate
// process as in a sandbox, and returns a client, a session id and the
// socket's path. LIMBS_BENCH_GOMAXPROCS sets the daemon's GOMAXPROCS;
// LIMBS_TEST_LIMBSD runs another build (see testbin.StartLimbsd).
func daemon(b *testing.B) (*client.Client, string, string) {
	b.Helper()
	var env []string
	if v := os.Getenv("LIMBS_BENCH_GOMAXPROCS"); v != "" {
		env = append(env, "GOMAXPROCS="+v)
	}
	d := testbin.StartLimbsd(b, false, env...)
	c, err := client.New("unix://"+d.Sock, d.Token, "")
	if err != nil {
		b.Fatal(err)
	}
	s, err := c.CreateSession(context.Background(), wire.CreateSession{Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	return c, s.ID, d.Sock
}

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

func p50(d []time.Duration) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkRoundTrip: `true` through the HTTP API over a Unix socket, next
// to the floor, a line bounced through `cat` on a raw PTY. Iterations
// alternate two callers of the API: a minimal HTTP/1.1 client (a request
// written and a response read on one socket: the API's own round trip) and
// the Go client library (package client, which adds its request building,
// response parsing and JSON decoding). Each exec follows an HTTP GET and a
// ping-pong, as every iteration does; b.N of each.
func BenchmarkRoundTrip(b *testing.B) {
	c, id, sock := daemon(b)
	ctx := context.Background()
	zero := 0.0
	for range 20 { // warm up
		if _, err := c.Exec(ctx, id, wire.Exec{Command: "true", YieldAfter: &zero}); err != nil {
			b.Fatal(err)
		}
	}
	raw := newRawClient(b, sock, c.Token(), id)
	floorPTY, err := perf.StartPTY("exec cat")
	if err != nil {
		b.Fatal(err)
	}
	defer floorPTY.Close()
	ptmx := floorPTY.F
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
	check := func(r wire.Result, err error) {
		if err != nil || r.Status != wire.StatusExited || r.ExitCode == nil || *r.ExitCode != 0 {
			b.Fatalf("exec true: %+v %v", r, err)
		}
	}
	api := make([]time.Duration, 0, b.N)
	lib := make([]time.Duration, 0, b.N)
	floor := make([]time.Duration, 0, b.N)
	hops := make([]time.Duration, 0, b.N)
	viaRaw := func() {
		t0 := time.Now()
		body := raw.exec()
		api = append(api, time.Since(t0))
		var r wire.Result
		err := json.Unmarshal(body, &r)
		check(r, err)
	}
	viaLib := func() {
		t0 := time.Now()
		r, err := c.Exec(ctx, id, wire.Exec{Command: "true", YieldAfter: &zero})
		lib = append(lib, time.Since(t0))
		check(r, err)
	}
	b.ResetTimer()
	for i := range 2 * b.N {
		t0 := time.Now()
		if _, err := c.GetSession(ctx, id); err != nil {
			b.Fatal(err)
		}
		hops = append(hops, time.Since(t0))
		if i%2 == 0 {
			viaRaw()
		} else {
			viaLib()
		}
		t0 = time.Now()
		pingpong()
		floor = append(floor, time.Since(t0))
	}
	b.StopTimer()
	a, l, f, h := p50(api), p50(lib), p50(floor), p50(hops)
	b.ReportMetric(ms(h), "http-get-p50-ms")
	b.ReportMetric(ms(a), "api-p50-ms")
	b.ReportMetric(ms(l), "client-p50-ms")
	b.ReportMetric(ms(f), "pty-floor-p50-ms")
	b.ReportMetric(float64(a)/float64(f), "api/floor")
	b.ReportMetric(0, "ns/op")
	fmt.Printf("round trip of `true`: limbsd API over unix socket p50 %.3f ms; raw PTY ping-pong p50 %.3f ms; ratio %.1fx; (with the Go client library: %.3f ms; an HTTP GET of the session: %.3f ms) (n=%d each)\n", ms(a), ms(f), float64(a)/float64(f), ms(l), ms(h), len(api))
}

// rawClient is the smallest HTTP/1.1 client of the exec route: one
// prebuilt request written to a kept-alive socket, and the response read
// to the end of its Content-Length.
type rawClient struct {
	b    *testing.B
	conn net.Conn
	req  []byte
	buf  []byte
}

func newRawClient(b *testing.B, sock, token, id string) *rawClient {
	conn, err := net.Dial("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	body := `{"command":"true","yield_after":0}`
	req := fmt.Sprintf("POST /v1/sessions/%s/exec HTTP/1.1\r\nHost: limbs\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", id, token, len(body), body)
	return &rawClient{b: b, conn: conn, req: []byte(req), buf: make([]byte, 64<<10)}
}

// exec sends the request and returns the response body.
func (r *rawClient) exec() []byte {
	if _, err := r.conn.Write(r.req); err != nil {
		r.b.Fatal(err)
	}
	// The header, read until its blank line (the body may come with it).
	n := 0
	var head []byte
	for {
		if n == len(r.buf) {
			r.b.Fatalf("exec answer header larger than %d bytes", n)
		}
		m, err := r.conn.Read(r.buf[n:])
		if err != nil {
			r.b.Fatalf("reading the exec response: %v (got %q)", err, r.buf[:n])
		}
		n += m
		var ok bool
		if head, _, ok = bytes.Cut(r.buf[:n], []byte("\r\n\r\n")); ok {
			break
		}
	}
	if !bytes.HasPrefix(head, []byte("HTTP/1.1 200 ")) {
		r.b.Fatalf("exec answered %q", r.buf[:n])
	}
	cl := -1
	for _, h := range bytes.Split(head, []byte("\r\n")) {
		if k, v, ok := bytes.Cut(h, []byte(":")); ok && strings.EqualFold(string(k), "Content-Length") {
			var err error
			if cl, err = strconv.Atoi(strings.TrimSpace(string(v))); err != nil {
				r.b.Fatalf("exec answered Content-Length %q", v)
			}
		}
	}
	if cl < 0 {
		r.b.Fatalf("exec answered without a Content-Length: %q", head)
	}
	start := len(head) + 4
	want := start + cl
	if want > len(r.buf) {
		r.b.Fatalf("exec answer of %d bytes is larger than the buffer", want)
	}
	if n < want {
		if _, err := io.ReadFull(r.conn, r.buf[n:want]); err != nil {
			r.b.Fatalf("reading the exec response body: %v", err)
		}
	}
	return r.buf[start:want]
}

// producer writes 50 MiB of text lines in large blocks.
const (
	outputSize = 50 << 20
	producer   = "yes 'the quick brown fox jumps over the lazy dog 0123456789 the quick brown fox' | head -c 52428800"
)

// BenchmarkThroughput: 50 MiB of output through a limbs command, next to
// the same producer read by a bare PTY read loop.
func BenchmarkThroughput(b *testing.B) {
	c, id, _ := daemon(b)
	ctx := context.Background()
	zero := 0.0
	var api, raw time.Duration
	for range b.N {
		took, n, err := perf.ReadLoop(ctx, producer)
		if err != nil {
			b.Fatal(err)
		}
		raw += took
		if n < outputSize {
			b.Fatalf("raw loop read %d bytes", n)
		}
		t0 := time.Now()
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
