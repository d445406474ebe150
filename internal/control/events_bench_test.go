package control_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/perf/figures"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// BenchmarkEvents is acceptance 5 of the events issue in one run, printed
// as one table with the targets next to the numbers:
//
//		make bench-events   # go test -run '^$' -bench '^BenchmarkEvents$' -benchtime 1x ./internal/control/
//
//	  - ingest: realistic journal events (command.started, output with its
//	    bytes, command.finished) into an event log as limbs serve's follower
//	    hands them over, next to the floor: the same events marshalled and
//	    written with one write(2) a batch (target: at least 50,000/s);
//	  - follow latency: a command's command.started and command.finished,
//	    from the time limbsd's journal stamps on them to their arrival at a
//	    client of GET /v1/sandboxes/{id}/events?follow=true on a real
//	    `limbs serve` (through its follower of limbsd's journal), next to a
//	    client of limbsd's own GET /v1/events?follow=true (target: p99 under
//	    100 ms);
//	  - exec round trip of `true` through two real `limbs serve` (local
//	    provider, real limbsd and bash), one with the event log following
//	    limbsd's journal and one with --events-follow=false, interleaved
//	    (target: at most 5% slower);
//	  - serve's RSS while a command prints LIMBS_BENCH_EVENTS_MIB MiB
//	    (default 256; 1024 for the full GiB) that its follower logs
//	    (target: flat).
//
// It never asserts a duration: numbers are printed, not tested.
func BenchmarkEvents(b *testing.B) {
	mib := 1024
	if v := os.Getenv("LIMBS_BENCH_EVENTS_MIB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 8 {
			b.Fatalf("LIMBS_BENCH_EVENTS_MIB=%q: give a size in MiB, at least 8", v)
		}
		mib = n
	}
	rounds := 300
	if v := os.Getenv("LIMBS_BENCH_EVENTS_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 10 {
			b.Fatalf("LIMBS_BENCH_EVENTS_ROUNDS=%q: give a count of commands, at least 10", v)
		}
		rounds = n
	}
	for b.Loop() {
		var t table
		progress := func(what string) { fmt.Fprintf(os.Stderr, "bench-events: %s\n", what) }
		progress("ingest")
		benchIngest(b, &t)
		progress("two limbs serve, with and without the follower")
		with := startBenchServe(b, true)
		without := startBenchServe(b, false)
		progress("follow latency")
		benchFollowLatency(b, &t, with, rounds)
		progress("exec round trips")
		benchExecRoundTrip(b, &t, with, without, rounds)
		progress(fmt.Sprintf("serve's RSS over %d MiB of output", mib))
		benchOutputRSS(b, &t, with, mib)
		t.print(os.Stdout)
	}
	b.ReportMetric(0, "ns/op")
}

// table collects the rows printed at the end.
type table struct{ rows [][5]string }

func (t *table) add(what, value, baseline, ratio, target string) {
	t.rows = append(t.rows, [5]string{what, value, baseline, ratio, target})
}

func (t *table) print(w io.Writer) {
	head := [5]string{"measure", "limbs", "baseline (same run)", "ratio", "target"}
	width := [5]int{}
	for _, r := range append([][5]string{head}, t.rows...) {
		for i, c := range r {
			width[i] = max(width[i], len(c))
		}
	}
	line := func(r [5]string) {
		var sb strings.Builder
		for i, c := range r {
			fmt.Fprintf(&sb, "| %-*s ", width[i], c)
		}
		fmt.Fprintln(w, sb.String()+"|")
	}
	fmt.Fprintln(w, "\nevents benchmark (acceptance 5 of issue 13):")
	line(head)
	var sep [5]string
	for i := range sep {
		sep[i] = strings.Repeat("-", width[i])
	}
	line(sep)
	for _, r := range t.rows {
		line(r)
	}
}

func msStr(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func mean(d []time.Duration) time.Duration {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}

// benchIngest: events/s into an event log through Ingest, as the follower
// calls it (a quiet stream: one event a call; a busy one: what is read,
// here 100), next to marshalling the same events and writing each batch
// with one write(2) to a file of the same disk (figures.Ingest, which
// limbs bench runs too).
func benchIngest(b *testing.B, t *table) {
	const n = 200_000
	for _, batch := range []int{1, 100} {
		rate, frate, err := figures.Ingest(n, batch)
		if err != nil {
			b.Fatal(err)
		}
		t.add(fmt.Sprintf("ingest, %d event(s) a call (n=%d)", batch, n), fmt.Sprintf("%.0f events/s", rate),
			fmt.Sprintf("%.0f events/s (marshal + write(2))", frate), fmt.Sprintf("%.2f", rate/frate), ">= 50,000/s")
	}
}

// benchServe is a real `limbs serve` with the local provider, and a
// sandbox with a session main.
type benchServe struct {
	pid     int
	addr    string
	dir     string         // its state dir
	ctl     *client.Client // the control plane
	c       *client.Client // the sandbox through limbs serve
	id      string         // the sandbox
	limbsd  *client.Client // the sandbox's limbsd, straight on its socket
	session string
}

func startBenchServe(b *testing.B, follow bool) *benchServe {
	b.Helper()
	dir := stateDir(b)
	removeAll(b, dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	logs := &testbin.Buffer{}
	cmd := exec.Command(limbsBinary(b), "serve", "--listen", addr, "--token", e2eToken, "--state-dir", dir,
		"--provider", "local", "--events-follow="+strconv.FormatBool(follow))
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	b.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		}
		if b.Failed() {
			b.Logf("limbs serve (events-follow=%v) log:\n%s", follow, logs.String())
		}
	})
	ctl, _ := client.New(addr, e2eToken, "")
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case <-exited:
			b.Fatalf("limbs serve exited at start:\n%s", logs.String())
		default:
		}
		if _, err := ctl.Health(context.Background()); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("limbs serve did not answer within a minute:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx := context.Background()
	var sb wire.Sandbox
	if err := ctl.JSON(ctx, http.MethodPost, "/sandboxes", wire.CreateSandbox{}, &sb); err != nil {
		b.Fatal(err)
	}
	c, _ := client.New(addr, e2eToken, "/sandboxes/"+sb.ID)
	s, err := c.CreateSession(ctx, wire.CreateSession{Name: "main"})
	if err != nil {
		b.Fatal(err)
	}
	meta, err := os.ReadFile(filepath.Join(dir, "sandboxes", sb.ID, "sandbox.json"))
	if err != nil {
		b.Fatal(err)
	}
	var m struct{ Spec struct{ Token string } }
	if err := json.Unmarshal(meta, &m); err != nil {
		b.Fatal(err)
	}
	direct, err := client.New("unix://"+filepath.Join(dir, "sandboxes", sb.ID, "run", "limbsd.sock"), m.Spec.Token, "")
	if err != nil {
		b.Fatal(err)
	}
	return &benchServe{pid: cmd.Process.Pid, addr: addr, dir: dir, ctl: ctl, c: c, id: sb.ID, limbsd: direct, session: s.ID}
}

func (s *benchServe) exec(b *testing.B, command string) wire.Result {
	zero := 0.0
	r, err := s.c.Exec(context.Background(), s.session, wire.Exec{Command: command, YieldAfter: &zero})
	if err != nil || r.Status != wire.StatusExited {
		b.Fatalf("exec %q: %+v %v", command, r, err)
	}
	return r
}

// arrivals records when command events arrive, by "command type".
type arrivals struct {
	mu  sync.Mutex
	at  map[string]time.Duration // arrival minus the event's time
	sig chan struct{}
}

func newArrivals() *arrivals {
	return &arrivals{at: map[string]time.Duration{}, sig: make(chan struct{}, 1)}
}

func (a *arrivals) note(ev wire.Event) {
	if ev.Type != wire.EventCommandStarted && ev.Type != wire.EventCommandFinished {
		return
	}
	d := time.Since(ev.Time)
	a.mu.Lock()
	a.at[ev.Command+" "+string(ev.Type)] = d
	a.mu.Unlock()
	select {
	case a.sig <- struct{}{}:
	default:
	}
}

func (a *arrivals) get(key string) (time.Duration, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	d, ok := a.at[key]
	return d, ok
}

// wait waits until both of a command's events arrived (10 s at most).
func (a *arrivals) wait(b *testing.B, command, who string) [2]time.Duration {
	deadline := time.After(10 * time.Second)
	for {
		s, ok1 := a.get(command + " " + string(wire.EventCommandStarted))
		f, ok2 := a.get(command + " " + string(wire.EventCommandFinished))
		if ok1 && ok2 {
			return [2]time.Duration{s, f}
		}
		select {
		case <-a.sig:
		case <-deadline:
			b.Fatalf("the events of command %s never reached %s", command, who)
		}
	}
}

// benchFollowLatency: command events from limbsd's journal to a follower
// of limbs serve's log, next to a follower of limbsd's journal itself.
// One command at a time; the latency of an event is its arrival minus
// the time limbsd stamped on it (one host, one clock).
func benchFollowLatency(b *testing.B, t *table, s *benchServe, rounds int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	viaServe, direct := newArrivals(), newArrivals()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = s.ctl.Sandboxes().FollowEvents(ctx, s.id, client.EventsQuery{Types: "command.*"}, func(ev wire.Event) error {
			viaServe.note(ev)
			return nil
		})
	}()
	es, err := s.limbsd.FollowEvents(ctx, 1, false)
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		defer wg.Done()
		defer es.Close()
		for {
			ev, err := es.Next()
			if err != nil {
				return
			}
			direct.note(ev)
		}
	}()
	s.exec(b, "true") // both followers are connected once this arrives
	var lat, base []time.Duration
	for i := range rounds + 1 {
		r := s.exec(b, "echo latency "+strconv.Itoa(i))
		v := viaServe.wait(b, r.CommandID, "the follower of limbs serve")
		d := direct.wait(b, r.CommandID, "the follower of limbsd")
		if i == 0 {
			continue // warm-up
		}
		lat = append(lat, v[0], v[1])
		base = append(base, d[0], d[1])
	}
	t.add(fmt.Sprintf("follow latency p50, limbsd -> serve follower (n=%d)", len(lat)), msStr(pct(lat, 50)), msStr(pct(base, 50))+" (follower of limbsd)",
		fmt.Sprintf("%.1f", float64(pct(lat, 50))/float64(pct(base, 50))), "")
	t.add(fmt.Sprintf("follow latency p99, limbsd -> serve follower (n=%d)", len(lat)), msStr(pct(lat, 99)), msStr(pct(base, 99))+" (follower of limbsd)",
		fmt.Sprintf("%.1f", float64(pct(lat, 99))/float64(pct(base, 99))), "< 100 ms")
}

// benchExecRoundTrip: `true` through limbs serve with the follower of
// limbsd's journal and through one without, interleaved (the order
// swapped each round, so neither always goes first).
func benchExecRoundTrip(b *testing.B, t *table, with, without *benchServe, rounds int) {
	for range 20 {
		with.exec(b, "true")
		without.exec(b, "true")
	}
	var w, wo []time.Duration
	timed := func(s *benchServe, into *[]time.Duration) {
		t0 := time.Now()
		s.exec(b, "true")
		*into = append(*into, time.Since(t0))
	}
	for i := range 2 * rounds {
		if i%2 == 0 {
			timed(with, &w)
			timed(without, &wo)
		} else {
			timed(without, &wo)
			timed(with, &w)
		}
	}
	t.add(fmt.Sprintf("exec `true` via serve p50, event log on (n=%d)", len(w)), msStr(pct(w, 50)), msStr(pct(wo, 50))+" (--events-follow=false)",
		fmt.Sprintf("%.3f", float64(pct(w, 50))/float64(pct(wo, 50))), "<= 1.05")
	t.add(fmt.Sprintf("exec `true` via serve mean, event log on (n=%d)", len(w)), msStr(mean(w)), msStr(mean(wo))+" (--events-follow=false)",
		fmt.Sprintf("%.3f", float64(mean(w))/float64(mean(wo))), "<= 1.05")
	t.add(fmt.Sprintf("exec `true` via serve p90, event log on (n=%d)", len(w)), msStr(pct(w, 90)), msStr(pct(wo, 90))+" (--events-follow=false)",
		fmt.Sprintf("%.3f", float64(pct(w, 90))/float64(pct(wo, 90))), "")
}

// procStatus reads a field of /proc/PID/status in MiB.
func procStatus(pid int, field string) float64 {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, ln := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(ln, field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}

// loggedOutput reads limbs_output_bytes_total from serve's /metrics: the
// output its follower has ingested.
func loggedOutput(b *testing.B, s *benchServe) int64 {
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+e2eToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatalf("reading limbs serve's /metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "limbs_output_bytes_total "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return int64(f)
		}
	}
	return 0
}

// benchOutputRSS: serve's RSS while a command prints mib MiB at full
// speed and serve's follower logs it, read when the command has printed
// an eighth, a quarter, a half and all of it, and once the log caught up;
// then what of the output the log holds (a follower that falls behind
// limbsd's journal by more than its output bound loses bytes, logged as
// log.gap events).
func benchOutputRSS(b *testing.B, t *table, s *benchServe, mib int) {
	ctx := context.Background()
	total := int64(mib) << 20
	sess, err := s.limbsd.GetSession(ctx, s.session)
	if err != nil {
		b.Fatal(err)
	}
	base := sess.OutputOffset
	before := loggedOutput(b, s)
	idle := procStatus(s.pid, "VmRSS")
	t0 := time.Now()
	done := make(chan error, 1)
	go func() {
		yield := 30.0
		r, err := s.c.Exec(ctx, s.session, wire.Exec{
			Command:    fmt.Sprintf("yes 'the quick brown fox jumps over the lazy dog 0123456789 the quick brown fox' | head -c %d", total),
			YieldAfter: &yield,
		})
		for err == nil && r.Status == wire.StatusRunning {
			r, err = s.c.Wait(ctx, s.session, wire.Wait{YieldAfter: &yield})
		}
		done <- err
	}()
	marks := []int64{total / 8, total / 4, total / 2, total}
	type sample struct {
		at            time.Duration
		rss, logged   float64
		printedAtMark int64
	}
	var samples []sample
	var printed time.Duration
	deadline := t0.Add(15 * time.Minute)
	next := 0
	finished := false
	prev := int64(-1)
	// The highest RSS sampled (every 50 ms), when, and at what output.
	var maxRSS float64
	var maxAt time.Duration
	var maxPrinted int64
	for stable := 0; ; {
		if time.Now().After(deadline) {
			b.Fatalf("after %s limbs serve has logged %d of %d bytes of output", time.Since(t0), loggedOutput(b, s)-before, total)
		}
		time.Sleep(50 * time.Millisecond)
		if !finished {
			select {
			case err := <-done:
				if err != nil {
					b.Fatalf("the command printing %d MiB: %v", mib, err)
				}
				finished, printed = true, time.Since(t0)
			default:
			}
		}
		sess, err := s.limbsd.GetSession(ctx, s.session)
		if err != nil {
			b.Fatal(err)
		}
		if r := procStatus(s.pid, "VmRSS"); r > maxRSS {
			maxRSS, maxAt, maxPrinted = r, time.Since(t0), sess.OutputOffset-base
		}
		for next < len(marks) && sess.OutputOffset-base >= marks[next] {
			samples = append(samples, sample{time.Since(t0), procStatus(s.pid, "VmRSS"), float64(loggedOutput(b, s)-before) / (1 << 20), marks[next]})
			next++
		}
		if !finished || next < len(marks) {
			continue
		}
		// The command ended: wait until the log stops growing.
		if got := loggedOutput(b, s); got == prev {
			stable++
		} else {
			stable, prev = 0, got
		}
		if stable >= 20 { // a second without growth
			break
		}
	}
	caught := time.Since(t0) - time.Second
	end := procStatus(s.pid, "VmRSS")
	peak := procStatus(s.pid, "VmHWM")
	for _, sm := range samples {
		t.add(fmt.Sprintf("serve RSS when %d MiB printed (%.0f s, %.0f MiB logged)", sm.printedAtMark>>20, sm.at.Seconds(), sm.logged), fmt.Sprintf("%.1f MiB", sm.rss),
			fmt.Sprintf("%.1f MiB (idle, before the command)", idle), fmt.Sprintf("%.2f", sm.rss/idle), "flat")
	}
	t.add(fmt.Sprintf("serve RSS once the log caught up (%.0f s)", caught.Seconds()), fmt.Sprintf("%.1f MiB", end), fmt.Sprintf("%.1f MiB (idle)", idle), fmt.Sprintf("%.2f", end/idle), "flat")
	t.add(fmt.Sprintf("serve highest RSS sampled (%.0f s, %d MiB printed)", maxAt.Seconds(), maxPrinted>>20), fmt.Sprintf("%.1f MiB", maxRSS), fmt.Sprintf("%.1f MiB (idle)", idle), fmt.Sprintf("%.2f", maxRSS/idle), "flat")
	t.add("serve peak RSS (VmHWM), over its life (every case)", fmt.Sprintf("%.1f MiB", peak), "", "", "flat")

	logged, lost, dup, gaps := scanOutput(b, s, base)
	// The terminal's bytes: the PTY turns each \n into \r\n.
	sess, err = s.limbsd.GetSession(ctx, s.session)
	if err != nil {
		b.Fatal(err)
	}
	term := sess.OutputOffset - base
	t.add(fmt.Sprintf("output in serve's log (printed in %.0f s, logged at %.1f MiB/s)", printed.Seconds(), float64(logged)/(1<<20)/caught.Seconds()),
		fmt.Sprintf("%.1f MiB", float64(logged)/(1<<20)), fmt.Sprintf("%.1f MiB on the terminal (\\n as \\r\\n)", float64(term)/(1<<20)), fmt.Sprintf("%.3f", float64(logged)/float64(term)), "1.000")
	t.add("output lost by the follower (log.gap events)", fmt.Sprintf("%.1f MiB", float64(lost)/(1<<20)), fmt.Sprintf("%d log.gap events", gaps), "", "0")
	t.add("output logged twice (an event's bytes before the end of the last)", fmt.Sprintf("%.1f MiB", float64(dup)/(1<<20)), "", "", "0")
	if mib < 1024 {
		t.add(fmt.Sprintf("(%d MiB: LIMBS_BENCH_EVENTS_MIB=1024 for the full GiB)", mib), "", "", "", "")
	}
}

// scanOutput reads the sandbox's log on disk: the output bytes it holds
// from offset base on and those missing between its output events, and
// its log.gap events.
func scanOutput(b *testing.B, s *benchServe, base int64) (logged, lost, dup int64, gaps int) {
	segs, err := filepath.Glob(filepath.Join(s.dir, "events", s.id, "*.jsonl"))
	if err != nil || len(segs) == 0 {
		b.Fatalf("no segment of %s's log in %s: %v", s.id, s.dir, err)
	}
	slices.Sort(segs)
	end := int64(-1)
	for _, p := range segs {
		f, err := os.Open(p)
		if err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 4<<20)
		for sc.Scan() {
			var ev struct {
				Type string `json:"type"`
				Data struct {
					Offset int64  `json:"offset"`
					Size   int64  `json:"size"`
					Bytes  []byte `json:"bytes"`
				} `json:"data"`
			}
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				b.Fatalf("%s: %v", p, err)
			}
			switch ev.Type {
			case string(wire.EventGap):
				gaps++
			case string(wire.EventOutput):
				off, n := ev.Data.Offset, int64(len(ev.Data.Bytes))
				if off+ev.Data.Size <= base {
					end = off + ev.Data.Size
					continue
				}
				if off < base { // the command's output starts in this event
					n -= base - off
					off = base
				}
				if end >= 0 && off > end {
					lost += off - max(end, base)
				}
				if end >= 0 && off < end { // bytes logged twice
					dup += min(end, off+n) - off
				}
				end = ev.Data.Offset + ev.Data.Size
				logged += n
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			b.Fatalf("%s: %v", p, err)
		}
	}
	return logged, lost, dup, gaps
}
