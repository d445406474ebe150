package cast

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/limbs-dev/limbs/internal/wire"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

var t0 = time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)

// log builds a sandbox's events the way the control plane's log holds
// them: seq from 1, output with its bytes and running offsets.
type log struct {
	events []wire.Event
	offset map[string]int64
}

func (l *log) add(session string, at time.Duration, typ wire.EventType, data any) {
	raw, err := json.Marshal(data)
	if err != nil {
		panic(err)
	}
	l.events = append(l.events, wire.Event{
		Seq: uint64(len(l.events) + 1), Time: t0.Add(at), Sandbox: "sb_test", Session: session,
		Type: typ, Source: wire.SourceAPI, Data: raw,
	})
}

func (l *log) created(session, name string, at time.Duration, cols, rows int) {
	l.add(session, at, wire.EventSessionCreated, wire.SessionData{Name: name, Cols: cols, Rows: rows})
}

func (l *log) out(session string, at time.Duration, b string) {
	if l.offset == nil {
		l.offset = map[string]int64{}
	}
	off := l.offset[session]
	l.offset[session] += int64(len(b))
	l.add(session, at, wire.EventOutput, wire.OutputData{Offset: off, Size: int64(len(b)), Bytes: []byte(b)})
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func allBytes() string {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return string(b)
}

// cases are sandboxes' logs and the session to export; each writes
// testdata/NAME.v2.cast, NAME.v3.cast and NAME.jsonl.
var cases = []struct {
	name string
	opts Options
	log  func(l *log)
}{
	{"basic", Options{Input: true, Markers: true}, func(l *log) {
		l.created("s_1", "main", 0, 100, 30)
		l.out("s_1", ms(12), "\x1b[?2004h$ ")
		l.add("s_1", ms(1500), wire.EventInput, wire.InputData{Text: "echo hi\r"})
		l.add("s_1", ms(1501), wire.EventCommandStarted, wire.CommandStartedData{Text: "echo hi", Via: "exec"})
		l.out("s_1", ms(1502), "echo hi\r\n\x1b[1;32mhi\x1b[0m\r\n")
		l.add("s_1", ms(2000), wire.EventSessionResized, wire.SessionData{Cols: 120, Rows: 40})
		l.add("s_1", ms(2100), wire.EventInput, wire.InputData{Text: "******", Masked: true})
		l.out("s_1", ms(2250), "$ ")
		l.add("s_1", ms(2300), wire.EventCommandFinished, wire.CommandFinishedData{Status: "exited"})
	}},
	{"utf8-split", Options{}, func(l *log) {
		l.created("s_1", "main", 0, 80, 24)
		l.out("s_1", ms(1), "caf\xc3")                      // é split 1+1
		l.out("s_1", ms(2), "\xa9 \xe2")                    // € split 1+1+1
		l.out("s_1", ms(3), "\x82")                         // ...
		l.out("s_1", ms(4), "\xac \xf0\x9f")                // 😀 split 2+2
		l.out("s_1", ms(5), "\x98\x80 done\r\n")            // ...
		l.out("s_1", ms(6), "\xe6\x97\xa5\xe6\x9c\xac\r\n") // whole
	}},
	{"invalid", Options{}, func(l *log) {
		l.created("s_1", "main", 0, 80, 24)
		l.out("s_1", ms(10), "a\xffb\xfe\xfec")  // bytes no UTF-8 sequence starts with
		l.out("s_1", ms(20), "\x80lone\r\n")     // a continuation byte with no lead
		l.out("s_1", ms(30), "\xe2\x82x\r\n")    // a sequence cut short
		l.out("s_1", ms(40), "\xed\xa0\x80\r\n") // a surrogate: three subparts
		l.out("s_1", ms(50), "end\xe2\x82")      // cut short at the stream's end
	}},
	{"binary", Options{}, func(l *log) {
		l.created("s_1", "main", 0, 80, 24)
		l.out("s_1", ms(100), allBytes())
	}},
	{"empty", Options{}, func(l *log) {
		l.created("s_1", "main", 0, 132, 43)
	}},
	{"pick-by-name", Options{Session: "second"}, func(l *log) {
		l.add("", 0, wire.EventSandboxCreated, wire.SandboxData{Image: "limbs/base:latest"})
		l.created("s_1", "main", ms(1), 80, 24)
		l.created("s_2", "second", ms(2), 90, 25)
		l.out("s_1", ms(3), "first's\r\n")
		l.out("s_2", ms(1003), "second's\r\n")
		l.out("s_1", ms(1004), "first's again\r\n")
	}},
	{"resent", Options{}, func(l *log) {
		// A chunk the log got twice, and one that overlaps the last.
		l.created("s_1", "main", 0, 80, 24)
		l.out("s_1", ms(10), "one ")
		l.events = append(l.events, l.events[len(l.events)-1])
		l.add("s_1", ms(20), wire.EventOutput, wire.OutputData{Offset: 2, Size: 6, Bytes: []byte("e two ")})
		l.offset["s_1"] = 8
		l.out("s_1", ms(30), "three\r\n")
	}},
}

func TestGolden(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var l log
			c.log(&l)
			rec, err := Build(l.events, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			var v2, v3, jl bytes.Buffer
			if err := rec.WriteV2(&v2, WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := rec.WriteV3(&v3, WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := rec.WriteJSONL(&jl); err != nil {
				t.Fatal(err)
			}
			golden(t, c.name+".v2.cast", v2.Bytes())
			golden(t, c.name+".v3.cast", v3.Bytes())
			golden(t, c.name+".jsonl", jl.Bytes())
			// Whatever the chunks, the "o" data is the session's output
			// with only invalid bytes replaced, in both versions.
			want := validUTF8(rec.Output())
			for v, b := range map[string][]byte{"v2": v2.Bytes(), "v3": v3.Bytes()} {
				if got := castOutput(t, b); got != want {
					t.Errorf("%s \"o\" data:\n got %q\nwant %q", v, got, want)
				}
			}
		})
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Errorf("%s differs (-want +got; go test -update rewrites it):\n%s", name, d)
	}
}

// castOutput parses an asciicast (v2 or v3) line by line, checking what a
// reader relies on, and returns its "o" data joined.
func castOutput(t *testing.T, b []byte) string {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	var out strings.Builder
	first := true
	var last float64
	version := 0
	for sc.Scan() {
		if first {
			first = false
			var h struct {
				Version int `json:"version"`
			}
			if err := json.Unmarshal(sc.Bytes(), &h); err != nil {
				t.Fatalf("header %q: %v", sc.Text(), err)
			}
			version = h.Version
			continue
		}
		if !utf8.Valid(sc.Bytes()) {
			t.Fatalf("line %q is not valid UTF-8", sc.Text())
		}
		var ev [3]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("event %q: %v", sc.Text(), err)
		}
		at, ok1 := ev[0].(float64)
		code, ok2 := ev[1].(string)
		data, ok3 := ev[2].(string)
		if !ok1 || !ok2 || !ok3 {
			t.Fatalf("event %q is not [number, string, string]", sc.Text())
		}
		if version == 2 && at < last || version == 3 && at < 0 {
			t.Errorf("event %q goes back in time", sc.Text())
		}
		last = at
		if code == "o" {
			out.WriteString(data)
		}
	}
	return out.String()
}

func TestBuild(t *testing.T) {
	var l log
	l.add("", 0, wire.EventSandboxCreated, wire.SandboxData{})
	l.created("s_1", "main", ms(1), 80, 24)
	l.out("s_1", ms(5), "a")
	l.created("s_2", "other", ms(6), 80, 24)
	l.out("s_2", ms(7), "b")
	// A journal's output event: offsets, no bytes.
	l.add("s_1", ms(8), wire.EventOutput, wire.OutputData{Offset: 1, Size: 4})
	l.offset["s_1"] = 5
	// A clock that ran back.
	l.out("s_1", ms(2), "c")

	t.Run("default is the first session", func(t *testing.T) {
		rec, err := Build(l.events, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if rec.Session != "s_1" || rec.Name != "main" || string(rec.Output()) != "ac" {
			t.Errorf("got session %s (%s) with output %q, want s_1 (main) with \"ac\"", rec.Session, rec.Name, rec.Output())
		}
		if rec.Missing != 4 {
			t.Errorf("Missing = %d, want the 4 bytes the journal's event did not carry", rec.Missing)
		}
		for i := 1; i < len(rec.Frames); i++ {
			if rec.Frames[i].At < rec.Frames[i-1].At {
				t.Errorf("frame %d at %v is before frame %d at %v", i, rec.Frames[i].At, i-1, rec.Frames[i-1].At)
			}
		}
	})
	t.Run("by id", func(t *testing.T) {
		rec, err := Build(l.events, Options{Session: "s_2"})
		if err != nil || string(rec.Output()) != "b" {
			t.Fatalf("got %v, %v; want s_2's output", rec, err)
		}
	})
	t.Run("unknown session", func(t *testing.T) {
		_, err := Build(l.events, Options{Session: "nope"})
		if !errors.Is(err, ErrNoSession) || !strings.Contains(err.Error(), "main (s_1)") {
			t.Errorf("got %v, want ErrNoSession naming the sessions there are", err)
		}
	})
	t.Run("no session at all", func(t *testing.T) {
		_, err := Build(l.events[:1], Options{})
		if !errors.Is(err, ErrNoSession) {
			t.Errorf("got %v, want ErrNoSession", err)
		}
	})
}

// TestSplitAnywhere: however a valid UTF-8 stream is cut into output
// events, the asciicast's "o" data joined is exactly the stream.
func TestSplitAnywhere(t *testing.T) {
	stream := "héllo € 😀 日本語 \x1b[31mred\x1b[0m ĉu\r\n"
	for size := 1; size <= 5; size++ {
		var l log
		l.created("s_1", "main", 0, 80, 24)
		for i := 0; i < len(stream); i += size {
			l.out("s_1", ms(i), stream[i:min(i+size, len(stream))])
		}
		rec, err := Build(l.events, Options{})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := rec.WriteV2(&b, WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if got := castOutput(t, b.Bytes()); got != stream {
			t.Errorf("chunks of %d bytes: got %q, want %q", size, got, stream)
		}
	}
}

// FuzzCarry: for any bytes cut anywhere, the written "o" data is valid
// UTF-8 and equals the whole stream with its invalid bytes replaced.
func FuzzCarry(f *testing.F) {
	f.Add([]byte("caf\xc3\xa9 \xe2\x82\xac"), uint8(1))
	f.Add([]byte("\xff\xe2\x82x\xf0\x9f\x98"), uint8(2))
	f.Add([]byte(allBytes()), uint8(7))
	f.Fuzz(func(t *testing.T, data []byte, size uint8) {
		n := int(size%8) + 1
		var l log
		l.created("s_1", "main", 0, 80, 24)
		for i := 0; i < len(data); i += n {
			l.out("s_1", ms(i), string(data[i:min(i+n, len(data))]))
		}
		rec, err := Build(l.events, Options{})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := rec.WriteV3(&b, WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if got, want := castOutput(t, b.Bytes()), validUTF8(data); got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	})
}

// TestPlayTiming: Play writes the output in order, waiting the recorded
// pauses divided by the speed, each capped at MaxIdle first.
func TestPlayTiming(t *testing.T) {
	var l log
	l.created("s_1", "main", 0, 80, 24)
	l.out("s_1", ms(100), "one ")
	l.out("s_1", ms(500), "two ")
	l.add("s_1", ms(600), wire.EventSessionResized, wire.SessionData{Cols: 100, Rows: 50})
	l.out("s_1", ms(10500), "three")
	rec, err := Build(l.events, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	clock := t0
	now := func() time.Time { return clock }
	sleep := func(ctx context.Context, d time.Duration) error { clock = clock.Add(d); return nil }
	err = Play(t.Context(), &out, rec, PlayOptions{Speed: 4, MaxIdle: 2 * time.Second, SizeHint: true, Now: now, Sleep: sleep})
	if err != nil {
		t.Fatal(err)
	}
	if want := "\x1b[8;24;80tone two \x1b[8;50;100tthree"; out.String() != want {
		t.Errorf("played %q, want %q", out.String(), want)
	}
	// (100 + 400 + 100 + min(9900, 2000)) ms / 4.
	if got, want := clock.Sub(t0), 650*time.Millisecond; got != want {
		t.Errorf("slept %v in all, want %v", got, want)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := Play(ctx, &out, rec, PlayOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Play with a cancelled context: %v, want context.Canceled", err)
	}
}
