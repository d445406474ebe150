package shell

import (
	"bytes"
	"strconv"
	"sync/atomic"
)

// Shell integration markers, printed by the shell itself (PS0, and the
// PROMPT_COMMAND function or PS1) as OSC 633 sequences that carry the
// session's secret token:
//
//	ESC ] 633 ; limbs ; TOKEN ; S BEL               a command starts
//	ESC ] 633 ; limbs ; TOKEN ; E ; STATUS ; CWD BEL  a prompt: the last command ended
//	ESC ] 633 ; limbs ; TOKEN ; X ; CWD BEL         the shell exits (EXIT trap), in CWD
//
// A bash shell proves its end and exit markers on its end-of-command
// channel (endchan.go), and prints E and X with the SEQ of that message
// instead of the cwd, which comes from the message (E also carries the
// status, which counts only when the message is lost: recover.go):
//
//	ESC ] 633 ; limbs ; TOKEN ; E ; SEQ ; STATUS BEL
//	ESC ] 633 ; limbs ; TOKEN ; X ; SEQ BEL
//
// A sequence with another token, or an E or X that the parser's verify
// rejects, is output like any other (the token is no secret from the
// command's own processes, which can read the shell's memory); a rejected
// E is also reported as a candidate end (evCandidate), which ends nothing
// unless the shell is at its prompt. Markers never reach the stream.
const markerPrefix = "\x1b]633;limbs;"

// maxMarker bounds a marker's length; longer sequences are output.
const maxMarker = 8192

const (
	evStart = 'S'
	evEnd   = 'E'
	evExit  = 'X'
	// evCandidate is an E marker whose message did not come: its bytes
	// stay in the output.
	evCandidate = 'e'
)

type event struct {
	kind   byte
	status int
	cwd    string
	pos    int // position in the data returned with it
}

// parser splits a PTY byte stream into output and markers, and follows the
// terminal modes that change how keys are encoded. Chunks may be split
// anywhere: a partial sequence at the end of one is held back until the
// next.
type parser struct {
	token   string
	pending []byte
	// verify, when set, proves an E or X marker with the given SEQ; an
	// unproven one is output.
	verify func(kind byte, seq []byte) (event, bool)

	// The terminal modes are written by the read loop (the parser's
	// owner, in feed) and read by Input on other goroutines, without the
	// session lock: atomics.
	appCursor atomic.Bool // DECCKM: ESC[?1h
	paste     atomic.Bool // bracketed paste: ESC[?2004h
}

func newParser(token string) *parser { return &parser{token: token} }

// feed parses chunk. The returned data aliases chunk or an internal buffer
// and is valid until the next call.
func (p *parser) feed(chunk []byte) (data []byte, events []event) {
	buf := chunk
	if len(p.pending) > 0 {
		buf = append(p.pending, chunk...)
		p.pending = nil
	}
	var out []byte // built once a marker is cut out
	cut := false
	last := 0 // start of buf not yet copied to out
	i := 0
	for {
		j := bytes.IndexByte(buf[i:], 0x1b)
		if j < 0 {
			break
		}
		j += i
		rest := buf[j:]
		if len(rest) < len(markerPrefix) {
			if bytes.HasPrefix([]byte(markerPrefix), rest) || isPartialMode(rest) {
				p.pending = append([]byte(nil), rest...)
				buf = buf[:j]
				break
			}
			p.trackMode(rest)
			i = j + 1
			continue
		}
		if !bytes.HasPrefix(rest, []byte(markerPrefix)) {
			if len(rest) < 32 && isPartialMode(rest) {
				p.pending = append([]byte(nil), rest...)
				buf = buf[:j]
				break
			}
			p.trackMode(rest)
			i = j + 1
			continue
		}
		bel := bytes.IndexByte(rest[len(markerPrefix):], 0x07)
		if bel < 0 {
			if len(rest) < maxMarker {
				p.pending = append([]byte(nil), rest...)
				buf = buf[:j]
				break
			}
			i = j + 1
			continue
		}
		body := rest[len(markerPrefix) : len(markerPrefix)+bel]
		ev, ok := p.parseBody(body)
		seqEnd := j + len(markerPrefix) + bel + 1
		if !ok {
			if ev.kind == evCandidate {
				// Where the marker starts in the returned data.
				ev.pos = j
				if cut {
					ev.pos = len(out) + j - last
				}
				events = append(events, ev)
			}
			i = seqEnd
			continue
		}
		cut = true
		out = append(out, buf[last:j]...)
		ev.pos = len(out)
		events = append(events, ev)
		last = seqEnd
		i = seqEnd
	}
	if !cut {
		return buf, events
	}
	out = append(out, buf[last:]...)
	return out, events
}

// parseBody reads TOKEN;S, TOKEN;E;STATUS;CWD, TOKEN;X;CWD, or with
// verify TOKEN;E;SEQ;STATUS and TOKEN;X;SEQ (a rejected E with a status
// is reported as a candidate, with ok false: it stays output).
func (p *parser) parseBody(body []byte) (event, bool) {
	tok, rest, ok := bytes.Cut(body, []byte{';'})
	if !ok || string(tok) != p.token {
		return event{}, false
	}
	kind, rest, _ := bytes.Cut(rest, []byte{';'})
	if p.verify != nil && (string(kind) == "E" || string(kind) == "X") {
		seq, st, _ := bytes.Cut(rest, []byte{';'})
		if ev, ok := p.verify(kind[0], seq); ok {
			return ev, true
		}
		if n, err := strconv.Atoi(string(st)); err == nil && kind[0] == 'E' && isDigits(seq) && n >= 0 && n < 256 {
			return event{kind: evCandidate, status: n}, false
		}
		return event{}, false
	}
	switch string(kind) {
	case "S":
		return event{kind: evStart}, true
	case "E":
		st, cwd, _ := bytes.Cut(rest, []byte{';'})
		n, err := strconv.Atoi(string(st))
		if err != nil {
			n = -1
		}
		return event{kind: evEnd, status: n, cwd: string(cwd)}, true
	case "X":
		return event{kind: evExit, cwd: string(rest)}, true
	}
	return event{}, false
}

// isPartialMode reports whether b could be the unfinished start of a
// private mode sequence (ESC [ ? digits ;).
func isPartialMode(b []byte) bool {
	if len(b) < 2 {
		return len(b) == 1
	}
	if b[1] != '[' {
		return false
	}
	if len(b) == 2 {
		return true
	}
	if b[2] != '?' {
		return false
	}
	for _, c := range b[3:] {
		if (c < '0' || c > '9') && c != ';' {
			return false
		}
	}
	return true
}

// trackMode follows DECCKM and bracketed paste from ESC[?...h / l.
func (p *parser) trackMode(b []byte) {
	if len(b) < 5 || b[1] != '[' || b[2] != '?' {
		return
	}
	k := 3
	for k < len(b) && (b[k] >= '0' && b[k] <= '9' || b[k] == ';') {
		k++
	}
	if k >= len(b) || (b[k] != 'h' && b[k] != 'l') {
		return
	}
	on := b[k] == 'h'
	for _, f := range bytes.Split(b[3:k], []byte{';'}) {
		switch string(f) {
		case "1":
			p.appCursor.Store(on)
		case "2004":
			p.paste.Store(on)
		}
	}
}
