// Package cast turns the events of one session of a sandbox (the control
// plane's log, wire.Event) into a recording of its terminal: asciicast v2
// (what asciinema 2 and asciinema-player read), asciicast v3 on request,
// or the raw events as JSON lines; and plays a recording back on a local
// terminal with its timing.
//
// A Recording keeps the terminal's bytes exactly as the session wrote
// them. Only the asciicast writers change anything, because asciicast
// "o" data is a JSON string and must be valid UTF-8: a multi-byte
// sequence split across two output events is carried whole into the
// later one, and each byte that starts no valid sequence becomes U+FFFD,
// as asciinema's own recorder does (its decoder replaces invalid input).
// The JSON lines export keeps every byte (base64, in wire.OutputData).
//
// It never trusts what it reads: events come from a sandbox's log, so
// sizes are bounded, times that run backwards are clamped, and output
// that overlaps what was already seen (a resent chunk) is dropped by
// offset.
package cast

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
)

// ErrNoSession is returned by Build when the events hold no session, or
// not the one asked for.
var ErrNoSession = errors.New("no such session in the events")

// Kind is the code of a Frame, as asciicast spells it.
type Kind byte

// Kinds of frames.
const (
	Output Kind = 'o' // bytes the terminal showed
	Input  Kind = 'i' // text typed into the session
	Resize Kind = 'r' // the terminal's size changed: Data is "COLSxROWS"
	Marker Kind = 'm' // a command started: Data is its text
)

// Frame is one timed event of a recording. At is measured from the
// recording's Start and never decreases from one frame to the next.
type Frame struct {
	At   time.Duration
	Kind Kind
	Data []byte
}

// Default terminal size of a session whose events say none.
const (
	DefaultCols = 80
	DefaultRows = 24
)

// maxTermSize bounds the sizes read from events: a terminal is never
// larger, and a writer must not be handed absurd numbers.
const maxTermSize = 10000

// Recording is one session's terminal, ready to write or play.
type Recording struct {
	Sandbox string
	Session string // the session's id
	Name    string // its name, when the events said it
	Start   time.Time
	// Cols and Rows are the terminal's size at the start.
	Cols, Rows int
	Frames     []Frame
	// Events are the session's events as read, for the JSON lines export.
	Events []wire.Event
	// Missing counts output bytes whose events carried no bytes (limbsd's
	// journal keeps only offsets) or that fell in a gap of the log.
	Missing int64
}

// Options choose what Build puts in a recording.
type Options struct {
	// Session is the id or name of the session; empty: the first one that
	// appears in the events.
	Session string
	// Input adds what was typed (asciicast "i" frames); masked input
	// stays masked.
	Input bool
	// Markers adds an asciicast "m" frame with the text of each command
	// as it starts, so that a player can jump between commands.
	Markers bool
}

// SessionInfo names a session seen in the events.
type SessionInfo struct {
	ID   string
	Name string
}

// Sessions lists the sessions of events in the order they first appear.
func Sessions(events []wire.Event) []SessionInfo {
	var out []SessionInfo
	index := map[string]int{}
	for _, e := range events {
		if e.Session == "" {
			continue
		}
		i, ok := index[e.Session]
		if !ok {
			i = len(out)
			index[e.Session] = i
			out = append(out, SessionInfo{ID: e.Session})
		}
		if out[i].Name == "" && e.Type == wire.EventSessionCreated {
			var d wire.SessionData
			if json.Unmarshal(e.Data, &d) == nil {
				out[i].Name = d.Name
			}
		}
	}
	return out
}

// pick returns the session of events that want names (an id or a name),
// or the first one when want is empty.
func pick(events []wire.Event, want string) (SessionInfo, error) {
	ss := Sessions(events)
	if len(ss) == 0 {
		return SessionInfo{}, fmt.Errorf("the sandbox's events name no session (has it run anything yet?): %w", ErrNoSession)
	}
	if want == "" {
		return ss[0], nil
	}
	for _, s := range ss {
		if s.ID == want {
			return s, nil
		}
	}
	for _, s := range ss {
		if s.Name != "" && s.Name == want {
			return s, nil
		}
	}
	names := make([]string, 0, len(ss))
	for _, s := range ss {
		if s.Name != "" {
			names = append(names, s.Name+" ("+s.ID+")")
		} else {
			names = append(names, s.ID)
		}
	}
	return SessionInfo{}, fmt.Errorf("session %q: %w; pass one of: %s", want, ErrNoSession, strings.Join(names, ", "))
}

// Build makes the recording of one session from a sandbox's events, in
// the order of their sequence numbers.
func Build(events []wire.Event, opts Options) (*Recording, error) {
	s, err := pick(events, opts.Session)
	if err != nil {
		return nil, err
	}
	rec := &Recording{Session: s.ID, Name: s.Name}
	var (
		started   bool
		sized     bool
		last      time.Duration
		nextByte  int64 = -1 // the output offset expected next; -1: none seen
		lastFrame       = func(k Kind, t time.Time, data []byte) {
			at := t.Sub(rec.Start)
			if at < last {
				at = last // a clock that ran back must not reorder a replay
			}
			last = at
			rec.Frames = append(rec.Frames, Frame{At: at, Kind: k, Data: data})
		}
	)
	for _, e := range events {
		if e.Session != s.ID {
			continue
		}
		rec.Events = append(rec.Events, e)
		if rec.Sandbox == "" {
			rec.Sandbox = e.Sandbox
		}
		if !started {
			started = true
			rec.Start = e.Time
		}
		switch e.Type {
		case wire.EventSessionCreated, wire.EventSessionResized, wire.EventSessionRestarted:
			var d wire.SessionData
			if json.Unmarshal(e.Data, &d) != nil || !validSize(d.Cols, d.Rows) {
				continue
			}
			if !sized {
				sized = true
				rec.Cols, rec.Rows = d.Cols, d.Rows
				if len(rec.Frames) == 0 {
					continue // the size at the start: the header says it
				}
			}
			lastFrame(Resize, e.Time, fmt.Appendf(nil, "%dx%d", d.Cols, d.Rows))
		case wire.EventOutput:
			var d wire.OutputData
			if json.Unmarshal(e.Data, &d) != nil || d.Size <= 0 || d.Offset < 0 {
				continue
			}
			b := d.Bytes
			if int64(len(b)) != d.Size {
				// No bytes (a journal without them) or a size that lies:
				// keep what there is, count the rest.
				if int64(len(b)) > d.Size {
					b = b[:d.Size]
				}
				rec.Missing += d.Size - int64(len(b))
			}
			if nextByte >= 0 {
				if skip := nextByte - d.Offset; skip > 0 {
					// A chunk resent after a reconnect: keep only what is new.
					if skip >= int64(len(b)) {
						if d.Offset+d.Size > nextByte {
							nextByte = d.Offset + d.Size
						}
						continue
					}
					b = b[skip:]
				} else if skip < 0 {
					rec.Missing += -skip // bytes the log lost
				}
			}
			nextByte = d.Offset + d.Size
			if len(b) > 0 {
				lastFrame(Output, e.Time, b)
			}
		case wire.EventInput:
			if !opts.Input {
				continue
			}
			var d wire.InputData
			if json.Unmarshal(e.Data, &d) != nil || d.Text == "" {
				continue
			}
			lastFrame(Input, e.Time, []byte(d.Text))
		case wire.EventCommandStarted:
			if !opts.Markers {
				continue
			}
			var d wire.CommandStartedData
			if json.Unmarshal(e.Data, &d) != nil {
				continue
			}
			lastFrame(Marker, e.Time, []byte(d.Text))
		}
	}
	if !sized {
		rec.Cols, rec.Rows = DefaultCols, DefaultRows
	}
	return rec, nil
}

func validSize(cols, rows int) bool {
	return cols > 0 && rows > 0 && cols <= maxTermSize && rows <= maxTermSize
}

// Duration is the time of the last frame.
func (r *Recording) Duration() time.Duration {
	if len(r.Frames) == 0 {
		return 0
	}
	return r.Frames[len(r.Frames)-1].At
}

// Output is the session's terminal output, every byte as written.
func (r *Recording) Output() []byte {
	var b []byte
	for _, f := range r.Frames {
		if f.Kind == Output {
			b = append(b, f.Data...)
		}
	}
	return b
}
