package cast

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/limbs-dev/limbs/internal/wire"
)

// WriteOptions are what a writer adds to the header.
type WriteOptions struct {
	// Title is the header's title; empty: "limbs SANDBOX SESSION".
	Title string
	// Env is the header's env; nil: the TERM and SHELL limbsd's shells run
	// with.
	Env map[string]string
	// IdleLimit, when positive, is the header's idle_time_limit: players
	// shorten pauses longer than it.
	IdleLimit time.Duration
}

func (o WriteOptions) title(r *Recording) string {
	if o.Title != "" {
		return o.Title
	}
	name := r.Name
	if name == "" {
		name = r.Session
	}
	if r.Sandbox == "" {
		return "limbs " + name
	}
	return "limbs " + r.Sandbox + " " + name
}

func (o WriteOptions) env() map[string]string {
	if o.Env != nil {
		return o.Env
	}
	return map[string]string{"TERM": "xterm-256color", "SHELL": "/bin/bash"}
}

func (o WriteOptions) idle() *float64 {
	if o.IdleLimit <= 0 {
		return nil
	}
	s := o.IdleLimit.Seconds()
	return &s
}

// headerV2 is the first line of an asciicast v2 file, in the order the
// format's documentation shows.
type headerV2 struct {
	Version   int               `json:"version"`
	Width     int               `json:"width"`
	Height    int               `json:"height"`
	Timestamp int64             `json:"timestamp,omitempty"`
	Idle      *float64          `json:"idle_time_limit,omitempty"`
	Title     string            `json:"title,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
}

type termV3 struct {
	Cols int    `json:"cols"`
	Rows int    `json:"rows"`
	Type string `json:"type,omitempty"`
}

type headerV3 struct {
	Version   int               `json:"version"`
	Term      termV3            `json:"term"`
	Timestamp int64             `json:"timestamp,omitempty"`
	Idle      *float64          `json:"idle_time_limit,omitempty"`
	Title     string            `json:"title,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
}

// WriteV2 writes r as asciicast v2: a header line, then one
// [seconds since the start, code, data] line per frame.
func (r *Recording) WriteV2(w io.Writer, o WriteOptions) error {
	h := headerV2{Version: 2, Width: r.Cols, Height: r.Rows, Timestamp: unix(r.Start), Idle: o.idle(), Title: o.title(r), Env: o.env()}
	return r.write(w, h, false)
}

// WriteV3 writes r as asciicast v3: a header line with a term object,
// then one [seconds since the previous frame, code, data] line per
// frame.
func (r *Recording) WriteV3(w io.Writer, o WriteOptions) error {
	env := o.env()
	h := headerV3{Version: 3, Term: termV3{Cols: r.Cols, Rows: r.Rows, Type: env["TERM"]}, Timestamp: unix(r.Start), Idle: o.idle(), Title: o.title(r), Env: env}
	return r.write(w, h, true)
}

func unix(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

func (r *Recording) write(w io.Writer, header any, relative bool) error {
	bw := bufio.NewWriter(w)
	if err := writeJSONLine(bw, header); err != nil {
		return err
	}
	var (
		u       utf8Carry
		prevUs  int64 // the previous line's time, in microseconds
		lastOut int64
	)
	line := func(at time.Duration, code Kind, data string) error {
		us := at.Microseconds()
		t := us
		if relative {
			t = us - prevUs
		}
		prevUs = us
		var b bytes.Buffer
		b.WriteByte('[')
		b.WriteString(strconv.FormatFloat(float64(t)/1e6, 'f', 6, 64))
		b.WriteString(`, "`)
		b.WriteByte(byte(code))
		b.WriteString(`", `)
		if err := encodeString(&b, data); err != nil {
			return err
		}
		b.WriteString("]\n")
		_, err := bw.Write(b.Bytes())
		return err
	}
	for _, f := range r.Frames {
		var data string
		switch f.Kind {
		case Output:
			data = u.next(f.Data)
			lastOut = f.At.Microseconds()
			if data == "" {
				continue // all of it waits for the rest of its sequence
			}
		default:
			data = validUTF8(f.Data)
		}
		if err := line(f.At, f.Kind, data); err != nil {
			return err
		}
	}
	if rest := u.flush(); rest != "" {
		at := time.Duration(lastOut) * time.Microsecond
		if p := time.Duration(prevUs) * time.Microsecond; at < p {
			at = p
		}
		if err := line(at, Output, rest); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func writeJSONLine(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

// encodeString appends s as a JSON string: control characters are
// escaped (\u001b), the rest is kept as UTF-8.
func encodeString(b *bytes.Buffer, s string) error {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return err
	}
	b.Truncate(b.Len() - 1) // Encode's newline
	return nil
}

// utf8Carry turns a stream of byte chunks into valid UTF-8 strings: an
// incomplete sequence at a chunk's end is held for the next chunk, and a
// byte that starts no valid sequence becomes U+FFFD.
type utf8Carry struct{ held []byte }

func (u *utf8Carry) next(chunk []byte) string {
	b := chunk
	if len(u.held) > 0 {
		b = append(u.held, chunk...)
		u.held = nil
	}
	// Hold back the last sequence if it is the start of a valid one that
	// the next chunk may complete (at most 3 bytes).
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				u.held = append([]byte(nil), b[i:]...)
				b = b[:i]
			}
			break
		}
	}
	return validUTF8(b)
}

// flush returns what is held at the stream's end (an incomplete
// sequence: one U+FFFD).
func (u *utf8Carry) flush() string {
	s := validUTF8(u.held)
	u.held = nil
	return s
}

// validUTF8 returns b as a string with each maximal subpart of an
// invalid sequence (a lead byte and the continuation bytes that were
// right for it, or one byte that starts nothing) replaced by U+FFFD: the
// Unicode standard's recommended practice, and what the decoder of
// asciinema's own recorder (Python's "replace") does.
func validUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
			size = invalidPrefix(b)
		} else {
			out = append(out, b[:size]...)
		}
		b = b[size:]
	}
	return string(out)
}

// invalidPrefix returns the length of the maximal subpart at the start of
// b, which does not begin a valid sequence: its lead byte and the
// continuation bytes that could still have followed it.
func invalidPrefix(b []byte) int {
	lo, hi, need := byte(0x80), byte(0xbf), 0
	switch c := b[0]; {
	case c >= 0xc2 && c <= 0xdf:
		need = 1
	case c == 0xe0:
		lo, need = 0xa0, 2
	case c == 0xed:
		hi, need = 0x9f, 2
	case c >= 0xe1 && c <= 0xef:
		need = 2
	case c == 0xf0:
		lo, need = 0x90, 3
	case c >= 0xf1 && c <= 0xf3:
		need = 3
	case c == 0xf4:
		hi, need = 0x8f, 3
	default:
		return 1 // a continuation byte, C0, C1 or F5-FF: starts nothing
	}
	n := 1
	for ; n <= need && n < len(b); n++ {
		if b[n] < lo || b[n] > hi {
			break
		}
		lo, hi = 0x80, 0xbf
	}
	return n
}

// WriteJSONL writes r's events, one JSON object a line, exactly as read
// (output bytes in base64: nothing is lost).
func (r *Recording) WriteJSONL(w io.Writer) error {
	return WriteEvents(w, r.Events)
}

// WriteEvents writes events as JSON lines.
func WriteEvents(w io.Writer, events []wire.Event) error {
	bw := bufio.NewWriter(w)
	for _, e := range events {
		if err := writeJSONLine(bw, e); err != nil {
			return fmt.Errorf("event %d: %w", e.Seq, err)
		}
	}
	return bw.Flush()
}
