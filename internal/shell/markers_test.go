package shell

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const tok = "0123456789abcdef"

// parseAll feeds chunks and returns the data and the events with their
// absolute positions in the data.
func parseAll(chunks [][]byte) ([]byte, []event) {
	return parseWith(newParser(tok), chunks)
}

// verifySeven proves the E and X markers whose SEQ is 7, as if only that
// message had come from the shell.
func verifySeven(kind byte, seq []byte) (event, bool) {
	if string(seq) != "7" {
		return event{}, false
	}
	return event{kind: kind, status: 3, cwd: "/real"}, true
}

func parseWith(p *parser, chunks [][]byte) ([]byte, []event) {
	var data []byte
	var evs []event
	for _, c := range chunks {
		d, e := p.feed(c)
		for _, ev := range e {
			ev.pos += len(data)
			evs = append(evs, ev)
		}
		data = append(data, d...)
	}
	// A held-back tail is output once nothing follows it.
	data = append(data, p.pending...)
	return data, evs
}

func TestParser(t *testing.T) {
	start := "\x1b]633;limbs;" + tok + ";S\a"
	end := func(st, cwd string) string { return "\x1b]633;limbs;" + tok + ";E;" + st + ";" + cwd + "\a" }
	tests := []struct {
		name string
		in   string
		data string
		evs  []event
	}{
		{"plain", "hello\r\n", "hello\r\n", nil},
		{"command", "echo hi\r\n" + start + "hi\r\n" + end("0", "/tmp") + "$ ", "echo hi\r\nhi\r\n$ ",
			[]event{{kind: evStart, pos: 9}, {kind: evEnd, status: 0, cwd: "/tmp", pos: 13}}},
		{"cwd with semicolons", end("127", "/a;b c"), "", []event{{kind: evEnd, status: 127, cwd: "/a;b c"}}},
		{"wrong token is output", "\x1b]633;limbs;bad;E;0;/\a", "\x1b]633;limbs;bad;E;0;/\a", nil},
		{"other OSC kept", "\x1b]0;title\a", "\x1b]0;title\a", nil},
		{"unterminated marker at end kept", "\x1b]633;limbs;" + tok, "\x1b]633;limbs;" + tok, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data, evs := parseAll([][]byte{[]byte(tc.in)})
			if string(data) != tc.data {
				t.Errorf("data %q, want %q", data, tc.data)
			}
			if diff := cmp.Diff(tc.evs, evs, cmp.AllowUnexported(event{})); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParserVerify(t *testing.T) {
	m := func(body string) string { return "\x1b]633;limbs;" + tok + ";" + body + "\a" }
	in := "a" + m("E;6") + "b" + m("E;0;/etc/fake") + "c" + m("E;7") + "d" + m("X;/etc/fake") + m("X;7") + m("S")
	p := newParser(tok)
	p.verify = verifySeven
	data, evs := parseWith(p, [][]byte{[]byte(in)})
	// Unproven markers stay as output; the proven ones carry the
	// message's status and cwd, never the marker's.
	want := "a" + m("E;6") + "b" + m("E;0;/etc/fake") + "cd" + m("X;/etc/fake")
	if string(data) != want {
		t.Errorf("data %q, want %q", data, want)
	}
	wantEvs := []event{{kind: evEnd, status: 3, cwd: "/real", pos: len(want) - len(m("X;/etc/fake")) - 1}, {kind: evExit, status: 3, cwd: "/real", pos: len(want)}, {kind: evStart, pos: len(want)}}
	if diff := cmp.Diff(wantEvs, evs, cmp.AllowUnexported(event{})); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestParserModes(t *testing.T) {
	p := newParser(tok)
	p.feed([]byte("x\x1b[?1h\x1b[?2004"))
	if !p.appCursor.Load() || p.paste.Load() {
		t.Fatalf("after ESC[?1h: app=%v paste=%v", p.appCursor.Load(), p.paste.Load())
	}
	p.feed([]byte("h"))
	if !p.paste.Load() {
		t.Fatal("bracketed paste split across reads not seen")
	}
	p.feed([]byte("\x1b[?1;2004l"))
	if p.appCursor.Load() || p.paste.Load() {
		t.Fatal("modes not reset")
	}
}

// FuzzParser checks that any split of any stream gives the same data and
// events as the whole, and that a marker with the wrong token never ends
// anything.
func FuzzParser(f *testing.F) {
	f.Add([]byte("echo hi\r\n\x1b]633;limbs;"+tok+";S\ahi\r\n\x1b]633;limbs;"+tok+";E;0;/tmp\a$ "), uint8(3))
	f.Add([]byte("\x1b]633;limbs;evil;E;0;/\a\x1b[?1h\x1b[31mred\x1b[0m"), uint8(1))
	f.Add([]byte("\x1b\x1b]\x1b]633\x1b]633;limbs;"+tok), uint8(7))
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		wholeData, wholeEvs := parseAll([][]byte{in})
		n := int(step%16) + 1
		var chunks [][]byte
		for i := 0; i < len(in); i += n {
			chunks = append(chunks, in[i:min(i+n, len(in))])
		}
		data, evs := parseAll(chunks)
		if !bytes.Equal(data, wholeData) {
			t.Fatalf("split %d: data %q, whole %q", n, data, wholeData)
		}
		if diff := cmp.Diff(wholeEvs, evs, cmp.AllowUnexported(event{})); diff != "" {
			t.Fatalf("split %d: events differ:\n%s", n, diff)
		}
		if !bytes.Contains(in, []byte(tok)) && len(evs) > 0 {
			t.Fatalf("events without the token: %v", evs)
		}
		// The same for a parser that proves its end markers.
		vp := newParser(tok)
		vp.verify = verifySeven
		wholeData, wholeEvs = parseWith(vp, [][]byte{in})
		vp = newParser(tok)
		vp.verify = verifySeven
		data, evs = parseWith(vp, chunks)
		if !bytes.Equal(data, wholeData) {
			t.Fatalf("verifying, split %d: data %q, whole %q", n, data, wholeData)
		}
		if diff := cmp.Diff(wholeEvs, evs, cmp.AllowUnexported(event{})); diff != "" {
			t.Fatalf("verifying, split %d: events differ:\n%s", n, diff)
		}
		for _, ev := range evs {
			if ev.kind != evStart && ev.cwd != "/real" {
				t.Fatalf("verifying: an end or exit not proven: %+v", ev)
			}
		}
	})
}

func TestUnfinishedTail(t *testing.T) {
	tests := []struct {
		in   string
		hold int
	}{
		{"abc", 0},
		{"abc\r", 1},
		{"abc\x1b[3", 3},
		{"abc\x1b[31m", 0},
		{"abc\x1b]0;ti", 6},
		{"ab\xe4\xb8", 2},
		{"ab\xe4\xb8\x96", 0},
		{"ab\r\n", 0},
	}
	for _, tc := range tests {
		if got := unfinishedTail([]byte(tc.in)); got != tc.hold {
			t.Errorf("unfinishedTail(%q) = %d, want %d", tc.in, got, tc.hold)
		}
	}
}

// TestParserCandidateEnd: an E marker with a status whose message did not
// come stays output, and is reported where it starts as a candidate end
// (recover.go); a proven one is cut out as before.
func TestParserCandidateEnd(t *testing.T) {
	start := "\x1b]633;limbs;" + tok + ";S\a"
	mark := func(seq, st string) string { return "\x1b]633;limbs;" + tok + ";E;" + seq + ";" + st + "\a" }
	in := start + "ab" + mark("5", "9") + "cd" + mark("7", "3") + "ef" + mark("6", "") + mark("8", "x")
	for _, split := range []int{0, 3, len(start) + 5, len(in) - 4} {
		p := newParser(tok)
		p.verify = verifySeven
		chunks := [][]byte{[]byte(in)}
		if split > 0 {
			chunks = [][]byte{[]byte(in[:split]), []byte(in[split:])}
		}
		data, evs := parseWith(p, chunks)
		wantData := "ab" + mark("5", "9") + "cdef" + mark("6", "") + mark("8", "x")
		if string(data) != wantData {
			t.Errorf("split %d: data %q, want %q", split, data, wantData)
		}
		want := []event{{kind: evStart}, {kind: evCandidate, status: 9, pos: 2}, {kind: evEnd, status: 3, cwd: "/real", pos: 2 + len(mark("5", "9")) + 2}}
		if diff := cmp.Diff(want, evs, cmp.AllowUnexported(event{})); diff != "" {
			t.Errorf("split %d: events (-want +got):\n%s", split, diff)
		}
	}
}
