package shell

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/limbs-dev/limbs/internal/screen"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Until: the conditions of exec, wait and input that end a call early
// (docs/api.md "Waiting for what matters"). They are evaluated by one
// watcher goroutine per call that asks, for the life of the call, never
// on the read loop: the watcher follows the stream's change channel (and
// takes mu and the stream's lock only briefly, emuMu through Screen),
// samples /proc/net on a short tick and renders the screen lazily, as
// GET .../screen does. It hands the first condition that held to the
// call's await, which builds the result; the watcher ends with the call.
//
//   - output: each line of the output this call returns (from the
//     command's first byte not yet returned), cleaned on its own as
//     `output` cleans it, is matched once when its newline arrives; the
//     line still being written is matched again as it grows. A line is
//     held up to untilLine bytes (its newest ones), so a match costs the
//     new bytes plus at most untilLine, never a rescan of the output.
//   - port: /proc/PID/net/tcp and tcp6 of the session's shell (its
//     network namespace: the sandbox's) sampled every untilTick.
//   - quiet: no output for that long, counted from the later of the
//     newest output and the call's start (a repeated wait on a silent
//     command waits again instead of returning at once).
//   - screen: the screen's text (lines joined by \n) matched when the
//     output changed, at most every untilScreenEvery, once the command
//     has started (so the prompt it was typed at does not count; what
//     earlier commands left on the screen does).

// untilLine bounds the unfinished line an output condition holds.
const untilLine = 16 << 10

// untilTick is how often the port is sampled (and the screen caught up).
const untilTick = 100 * time.Millisecond

// untilScreenEvery bounds how often the screen is rendered for a match.
const untilScreenEvery = 50 * time.Millisecond

// maxMatchedText bounds Result.MatchedText, in characters.
const maxMatchedText = 200

// untilSpec is a validated wire.Until.
type untilSpec struct {
	output *regexp.Regexp
	screen *regexp.Regexp
	port   int
	quiet  time.Duration
}

// untilHit is a condition that held, and what held.
type untilHit struct {
	kind, text string
}

// compileUntil validates u (nil when u asks for nothing).
func compileUntil(u *wire.Until) (*untilSpec, error) {
	if u.Empty() {
		return nil, nil
	}
	sp := &untilSpec{}
	re := func(key string, expr *string) (*regexp.Regexp, error) {
		if expr == nil {
			return nil, nil
		}
		if *expr == "" {
			return nil, fmt.Errorf("until.%s is empty, which matches at once: give a regular expression for the text to wait for, or leave %s out: %w", key, key, wire.ErrBadRequest)
		}
		r, err := regexp.Compile(*expr)
		if err != nil {
			return nil, fmt.Errorf("until.%s is not a valid regular expression (Go RE2 syntax, as in https://pkg.go.dev/regexp/syntax): %v. Put a backslash before ( [ . * + ? to match them as text: %w", key, err, wire.ErrBadRequest)
		}
		return r, nil
	}
	var err error
	if sp.output, err = re(wire.MatchedOutput, u.Output); err != nil {
		return nil, err
	}
	if sp.screen, err = re(wire.MatchedScreen, u.Screen); err != nil {
		return nil, err
	}
	if u.Port != nil {
		if *u.Port < 1 || *u.Port > 65535 {
			return nil, fmt.Errorf("until.port must be a TCP port number from 1 to 65535, got %d: %w", *u.Port, wire.ErrBadRequest)
		}
		sp.port = *u.Port
	}
	if u.Quiet != nil {
		q := *u.Quiet
		if !(q > 0) || q > 1e7 || math.IsInf(q, 0) {
			return nil, fmt.Errorf("until.quiet must be a number of seconds > 0 (such as 2 or 0.5), got %v: %w", q, wire.ErrBadRequest)
		}
		sp.quiet = time.Duration(q * float64(time.Second))
	}
	return sp, nil
}

// apply puts h into r: only a running result says a condition held.
func (h untilHit) apply(r *wire.Result) {
	if r.Status != wire.StatusRunning {
		return
	}
	r.Matched, r.MatchedText = h.kind, h.text
}

// watchUntil evaluates sp for the call waiting on c until ctx ends, and
// sends the first condition that holds (once) on the channel it returns;
// nil when sp is nil (a receive then blocks forever).
func (s *Session) watchUntil(ctx context.Context, c *command, sp *untilSpec) <-chan untilHit {
	if sp == nil {
		return nil
	}
	hits := make(chan untilHit, 1)
	go s.untilLoop(ctx, c, sp, hits)
	return hits
}

// untilLoop is the watcher of one call (see the top of this file).
func (s *Session) untilLoop(ctx context.Context, c *command, sp *untilSpec, hits chan<- untilHit) {
	start := time.Now()
	tick := time.NewTicker(untilTick)
	defer tick.Stop()
	var quietC <-chan time.Time
	var quiet *time.Timer
	if sp.quiet > 0 {
		quiet = time.NewTimer(sp.quiet)
		defer quiet.Stop()
		quietC = quiet.C
	}
	ol := &outputLines{re: sp.output, pos: -1}
	var lastScreen time.Time
	screenEnd := int64(-1)
	sample := sp.port > 0
	for {
		end, changed := s.out.changed()
		if sp.output == nil && sp.screen == nil {
			changed = nil // only the tick and the quiet timer matter
		}
		s.mu.Lock()
		started, returned, ended := c.started, c.returned, c.ended
		s.mu.Unlock()
		if ended {
			return // the call answers the end
		}
		if started && ol.pos < 0 {
			ol.pos = returned
		}
		if sp.output != nil && started {
			if h, ok := ol.scan(s, end); ok {
				hits <- h
				return
			}
		}
		if sp.screen != nil && started && end != screenEnd && time.Since(lastScreen) >= untilScreenEvery {
			lastScreen, screenEnd = time.Now(), end
			if h, ok := s.screenHit(sp.screen); ok {
				hits <- h
				return
			}
		}
		if sample {
			sample = false
			if addr, ok := s.listening(sp.port); ok {
				hits <- untilHit{kind: wire.MatchedPort, text: addr}
				return
			}
		}
		if quiet != nil {
			last := max(s.lastOut.Load(), start.UnixNano())
			d := time.Until(time.Unix(0, last).Add(sp.quiet))
			if d <= 0 {
				hits <- untilHit{kind: wire.MatchedQuiet}
				return
			}
			quiet.Reset(d)
		}
		select {
		case <-ctx.Done():
			return
		case <-c.done:
			return
		case <-changed:
		case <-quietC:
		case <-tick.C:
			sample = sp.port > 0
		}
	}
}

// outputLines matches an output condition line by line over the stream
// from pos (see the top of this file).
type outputLines struct {
	re   *regexp.Regexp
	pos  int64  // the stream offset scanned up to; < 0: not yet started
	line []byte // the raw bytes of the line being written, at most untilLine
	buf  []byte
}

// scan matches the lines completed in [pos, end) and the line being
// written, and moves pos to end.
func (o *outputLines) scan(s *Session, end int64) (untilHit, bool) {
	if o.pos < 0 || end <= o.pos {
		return untilHit{}, false
	}
	if o.buf == nil {
		o.buf = make([]byte, 64<<10)
	}
	for o.pos < end {
		n, err := s.out.readAt(o.buf[:min(int64(len(o.buf)), end-o.pos)], o.pos)
		if n == 0 {
			var g *wire.GoneError
			if errors.As(err, &g) && g.To > o.pos {
				o.pos, o.line = g.To, o.line[:0] // no longer kept: go on after it
				continue
			}
			break
		}
		o.pos += int64(n)
		b := o.buf[:n]
		for len(b) > 0 {
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				o.add(b)
				break
			}
			o.add(b[:i])
			b = b[i+1:]
			if h, ok := o.match(); ok {
				return h, true
			}
			o.line = o.line[:0]
		}
	}
	if len(o.line) > 0 {
		return o.match()
	}
	return untilHit{}, false
}

// add appends raw bytes to the line being written, keeping its newest
// untilLine bytes.
func (o *outputLines) add(b []byte) {
	if len(b) >= untilLine {
		o.line = append(o.line[:0], b[len(b)-untilLine:]...)
		return
	}
	if over := len(o.line) + len(b) - untilLine; over > 0 {
		o.line = o.line[:copy(o.line, o.line[over:])]
	}
	o.line = append(o.line, b...)
}

// match cleans the line being written and matches it.
func (o *outputLines) match() (untilHit, bool) {
	text := strings.TrimRight(screen.Clean(o.line), "\r\n")
	if loc := o.re.FindStringIndex(text); loc != nil {
		return untilHit{kind: wire.MatchedOutput, text: clipRunes(text[loc[0]:loc[1]], maxMatchedText)}, true
	}
	return untilHit{}, false
}

// screenHit matches re against the screen's text.
func (s *Session) screenHit(re *regexp.Regexp) (untilHit, bool) {
	scr, err := s.Screen()
	if err != nil {
		return untilHit{}, false
	}
	text := strings.Join(scr.Lines, "\n")
	if loc := re.FindStringIndex(text); loc != nil {
		return untilHit{kind: wire.MatchedScreen, text: clipRunes(text[loc[0]:loc[1]], maxMatchedText)}, true
	}
	return untilHit{}, false
}

func clipRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for range n {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i]
}

// listening reports whether TCP port is in LISTEN state in the network
// namespace of the session's shell, and the address it listens on.
func (s *Session) listening(port int) (string, bool) {
	s.mu.Lock()
	pid := 0
	if s.p != nil {
		pid = s.p.pid
	}
	s.mu.Unlock()
	dir := "/proc/self/net"
	if pid > 0 {
		dir = "/proc/" + strconv.Itoa(pid) + "/net"
	}
	for _, f := range []string{"tcp", "tcp6"} {
		if addr, ok := listeningIn(dir+"/"+f, port); ok {
			return addr, true
		}
	}
	return "", false
}

// maxNetLines bounds the lines read of one /proc/net/tcp file.
const maxNetLines = 1 << 17

// tcpListen is the st column of a socket in LISTEN state.
const tcpListen = "0A"

// listeningIn reads one /proc/net/tcp{,6} file (kernel text: "sl
// local_address rem_address st ...", addresses as HEXIP:HEXPORT).
func listeningIn(path string, port int) (string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 0; sc.Scan() && n < maxNetLines; n++ {
		fs := strings.Fields(sc.Text())
		if len(fs) < 4 || fs[3] != tcpListen {
			continue
		}
		ip, p, ok := strings.Cut(fs[1], ":")
		if !ok {
			continue
		}
		if v, err := strconv.ParseUint(p, 16, 16); err != nil || int(v) != port {
			continue
		}
		return net.JoinHostPort(procIP(ip), strconv.Itoa(port)), true
	}
	return "", false
}

// procIP decodes an address of /proc/net/tcp: the 32-bit words of the
// address in the host's byte order (little endian on every platform
// limbsd is built for).
func procIP(h string) string {
	b, err := hex.DecodeString(h)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return h
	}
	for i := 0; i+4 <= len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	return net.IP(b).String()
}
