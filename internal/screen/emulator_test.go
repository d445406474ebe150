package screen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/creack/pty"
	"github.com/google/go-cmp/cmp"

	"github.com/limbs-dev/limbs/internal/wire"
)

// TestScreenGolden feeds the byte streams of testdata/screen/*.in (real
// programs recorded by capture.sh on an 80x24 terminal, and hand-made
// streams) to an 80x24 emulator and compares its snapshot with the .golden
// JSON next to them.
func TestScreenGolden(t *testing.T) {
	ins, err := filepath.Glob("testdata/screen/*.in")
	if err != nil || len(ins) == 0 {
		t.Fatalf("no golden inputs in testdata/screen (err %v)", err)
	}
	for _, in := range ins {
		name := strings.TrimSuffix(filepath.Base(in), ".in")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			e := NewEmulator(80, 24)
			defer e.Close()
			e.Write(raw)
			got := e.Snapshot()

			golden := strings.TrimSuffix(in, ".in") + ".golden"
			if *update {
				b, err := json.MarshalIndent(got, "", "  ")
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, append(b, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			b, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			var want wire.Screen
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatalf("%s: %v", golden, err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("screen mismatch (-want +got):\n%s", diff)
			}

			// The screen does not depend on how the stream was cut.
			split := NewEmulator(80, 24)
			defer split.Close()
			for i := range raw {
				split.Write(raw[i : i+1])
			}
			if diff := cmp.Diff(got, split.Snapshot()); diff != "" {
				t.Errorf("one-byte writes give another screen (-whole +bytewise):\n%s", diff)
			}
		})
	}
}

func TestEmulator(t *testing.T) {
	tests := []struct {
		name       string
		cols, rows int
		in         string
		check      func(t *testing.T, s wire.Screen)
	}{
		{"empty screen", 10, 3, "", func(t *testing.T, s wire.Screen) {
			want := wire.Screen{Cols: 10, Rows: 3, Lines: []string{"", "", ""}}
			if diff := cmp.Diff(want, s); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		}},
		{"alt screen on", 20, 4, "main\r\n\x1b[?1049hfull", func(t *testing.T, s wire.Screen) {
			if !s.AltScreen || s.Lines[0] != "full" && s.Lines[1] != "full" {
				t.Errorf("alt screen = %v, lines %q; want the full-screen text", s.AltScreen, s.Lines)
			}
		}},
		{"alt screen off restores main", 20, 4, "main\r\n\x1b[?1049h\x1b[Hfull\x1b[?1049l", func(t *testing.T, s wire.Screen) {
			if s.AltScreen || s.Lines[0] != "main" || strings.Contains(strings.Join(s.Lines, "\n"), "full") {
				t.Errorf("alt screen = %v, lines %q; want the main screen back", s.AltScreen, s.Lines)
			}
		}},
		{"title osc 0", 20, 2, "\x1b]0;hello\x07", func(t *testing.T, s wire.Screen) {
			if s.Title != "hello" {
				t.Errorf("title = %q", s.Title)
			}
		}},
		{"title osc 2 with semicolons and ST", 20, 2, "\x1b]2;a; b; c\x1b\\", func(t *testing.T, s wire.Screen) {
			if s.Title != "a; b; c" {
				t.Errorf("title = %q", s.Title)
			}
		}},
		{"cursor position", 20, 5, "\x1b[3;7Hx", func(t *testing.T, s wire.Screen) {
			if s.Cursor != (wire.Cursor{Row: 2, Col: 7}) || s.Lines[2] != "      x" {
				t.Errorf("cursor %+v, line %q", s.Cursor, s.Lines[2])
			}
		}},
		{"trailing spaces trimmed", 20, 2, "a   \x1b[41m   \x1b[m", func(t *testing.T, s wire.Screen) {
			if s.Lines[0] != "a" {
				t.Errorf("line %q", s.Lines[0])
			}
		}},
		{"wide characters", 10, 2, "日本x", func(t *testing.T, s wire.Screen) {
			if s.Lines[0] != "日本x" || s.Cursor.Col != 5 {
				t.Errorf("line %q cursor %+v; want 日本x with the cursor at column 5", s.Lines[0], s.Cursor)
			}
		}},
		{"top -b style", 40, 4, "top - 19:40:33 up 10 min\r\nTasks:  12 total\r\n\r\n    PID USER      %CPU\r\n", func(t *testing.T, s wire.Screen) {
			want := []string{"Tasks:  12 total", "", "    PID USER      %CPU", ""}
			if diff := cmp.Diff(want, s.Lines); diff != "" {
				t.Errorf("scrolled lines (-want +got):\n%s", diff)
			}
		}},
		{"invalid utf8 is replaced", 10, 1, "a\xffb", func(t *testing.T, s wire.Screen) {
			if !utf8.ValidString(s.Lines[0]) || !strings.HasPrefix(s.Lines[0], "a") {
				t.Errorf("line %q", s.Lines[0])
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := NewEmulator(tt.cols, tt.rows)
			defer e.Close()
			e.Write([]byte(tt.in))
			tt.check(t, e.Snapshot())
		})
	}
}

func TestEmulatorResize(t *testing.T) {
	e := NewEmulator(20, 5)
	defer e.Close()
	e.Write([]byte("hello\r\nworld"))
	e.Resize(40, 10)
	s := e.Snapshot()
	if s.Cols != 40 || s.Rows != 10 || len(s.Lines) != 10 || s.Lines[0] != "hello" || s.Lines[1] != "world" {
		t.Fatalf("after growing: %dx%d %q", s.Cols, s.Rows, s.Lines)
	}
	e.Resize(3, 2)
	s = e.Snapshot()
	if s.Cols != 3 || s.Rows != 2 || len(s.Lines) != 2 {
		t.Fatalf("after shrinking: %dx%d %q", s.Cols, s.Rows, s.Lines)
	}
	for _, l := range s.Lines {
		if utf8.RuneCountInString(l) > 3 {
			t.Errorf("line %q wider than 3 columns", l)
		}
	}
	if s.Cursor.Row >= 2 || s.Cursor.Col >= 3 {
		t.Errorf("cursor %+v outside the 3x2 screen", s.Cursor)
	}
	e.Resize(0, -1) // nonsense sizes become 1x1, never a panic
	if s := e.Snapshot(); s.Cols != 1 || s.Rows != 1 {
		t.Errorf("Resize(0, -1) gave %dx%d; want 1x1", s.Cols, s.Rows)
	}
}

// writeOrHang runs e.Write and fails the test if it does not return: a
// terminal query whose reply nobody reads blocks x/vt's Write forever.
func writeOrHang(t *testing.T, e *Emulator, p []byte) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Write(p)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Write is blocked on an unread terminal reply")
	}
}

func TestEmulatorQueriesNeverBlock(t *testing.T) {
	e := NewEmulator(80, 24)
	defer e.Close()
	queries := []string{"\x1b[6n", "\x1b[?6n", "\x1b[c", "\x1b[>c", "\x1b[5n", "\x1b]10;?\x07", "\x1b]11;?\x07", "\x1b[?2004$p", "\x1b[18t"}
	for _, q := range queries {
		writeOrHang(t, e, bytes.Repeat([]byte(q), 100))
	}
	writeOrHang(t, e, []byte("\x1b[Hstill alive"))
	if s := e.Snapshot(); s.Lines[0] != "still alive" {
		t.Errorf("line 0 = %q after the queries", s.Lines[0])
	}
}

func TestEmulatorClose(t *testing.T) {
	e := NewEmulator(10, 2)
	e.Write([]byte("kept"))
	e.Close()
	e.Close() // twice is fine
	writeOrHang(t, e, []byte("\x1b[6nignored"))
	e.Resize(20, 4)
	if s := e.Snapshot(); s.Lines[0] != "kept" || s.Cols != 10 {
		t.Errorf("after Close: %dx%d %q; want the last screen, unchanged", s.Cols, s.Rows, s.Lines)
	}
}

// TestEmulatorConcurrent is for the race detector: the PTY read loop writes
// while API calls take snapshots and resize.
func TestEmulatorConcurrent(t *testing.T) {
	e := NewEmulator(80, 24)
	defer e.Close()
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 200 {
			e.Write([]byte("\x1b[31mline \x1b[6n" + strings.Repeat("x", i%80) + "\r\n"))
		}
	})
	wg.Go(func() {
		for range 200 {
			if s := e.Snapshot(); len(s.Lines) != s.Rows {
				t.Errorf("snapshot has %d lines for %d rows", len(s.Lines), s.Rows)
				return
			}
		}
	})
	wg.Go(func() {
		for i := range 50 {
			e.Resize(40+i, 10+i%20)
		}
	})
	wg.Wait()
}

// TestEmulatorLiveVim runs a real vim on a real PTY and reads its screen.
func TestEmulatorLiveVim(t *testing.T) {
	vim, err := exec.LookPath("vim")
	if err != nil {
		t.Skip("vim is not installed: the live full-screen test needs it")
	}
	file := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(file, []byte("first line\nsecond: 日本語\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-5*time.Second))
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, vim, "-u", "NONE", "-N", "-n", "-i", "NONE", file)
	cmd.Env = append(os.Environ(), "TERM=xterm-256color")
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	defer cmd.Process.Kill() //nolint:errcheck // already gone when the test passes

	e := NewEmulator(80, 24)
	defer e.Close()
	changed := make(chan struct{}, 1)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			if n > 0 {
				e.Write(buf[:n])
				select {
				case changed <- struct{}{}:
				default:
				}
			}
			if err != nil {
				return // EIO once vim has exited
			}
		}
	}()
	waitScreen := func(what string, ok func(wire.Screen) bool) wire.Screen {
		t.Helper()
		for {
			s := e.Snapshot()
			if ok(s) {
				return s
			}
			select {
			case <-changed:
			case <-ended:
				if s := e.Snapshot(); ok(s) {
					return s
				}
				t.Fatalf("vim ended before the screen showed %s; screen:\n%s", what, strings.Join(e.Snapshot().Lines, "\n"))
			case <-ctx.Done():
				t.Fatalf("the screen never showed %s; screen:\n%s", what, strings.Join(e.Snapshot().Lines, "\n"))
			}
		}
	}

	s := waitScreen("the file in vim", func(s wire.Screen) bool {
		return s.AltScreen && s.Lines[0] == "first line" && strings.Contains(s.Lines[23], "notes.txt")
	})
	if s.Lines[1] != "second: 日本語" || s.Lines[2] != "~" || s.Cursor != (wire.Cursor{}) {
		t.Errorf("vim screen: lines %q, cursor %+v", s.Lines[:3], s.Cursor)
	}
	if _, err := ptmx.Write([]byte(":q!\r")); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("vim: %v", err)
	}
	<-ended
	if s := e.Snapshot(); s.AltScreen {
		t.Errorf("alt screen still on after vim quit: %q", s.Lines)
	}
}

func FuzzEmulator(f *testing.F) {
	for _, s := range []string{"\x1b[6n", "\x1b[?1049hx\x1b[?1049l", "\x1b]0;t\x07", "日本\x1b[2;3H", "\x1bP$q m\x1b\\", "\x1b[99999;99999H\x1b[99999@"} {
		f.Add([]byte(s), uint8(80), uint8(24))
	}
	f.Fuzz(func(t *testing.T, raw []byte, cols, rows uint8) {
		c, r := int(cols%200)+1, int(rows%100)+1
		e := NewEmulator(c, r)
		defer e.Close()
		writeOrHang(t, e, raw)
		s := e.Snapshot()
		if !controlInsideEscape(raw) {
			o := newDirectEmulator(c, r)
			defer o.Close()
			writeOrHang(t, o, raw)
			if diff := cmp.Diff(o.Snapshot(), s); diff != "" {
				t.Fatalf("held screen differs from direct (-direct +held):\n%s", diff)
			}
		}
		if s.Cols != c || s.Rows != r || len(s.Lines) != r {
			t.Fatalf("snapshot %dx%d with %d lines; want %dx%d", s.Cols, s.Rows, len(s.Lines), c, r)
		}
		for _, l := range s.Lines {
			if !utf8.ValidString(l) {
				t.Fatalf("line %q is not valid UTF-8", l)
			}
		}
		if !utf8.ValidString(s.Title) {
			t.Fatalf("title %q is not valid UTF-8", s.Title)
		}
		e.Resize(c/2+1, r/2+1)
		e.Snapshot()
	})
}

func BenchmarkEmulatorWrite(b *testing.B) {
	plain := bytes.Repeat([]byte("2026-11-30T19:40:33Z INFO building package github.com/limbs-dev/limbs ok\r\n"), (1<<20)/74)
	var tui bytes.Buffer
	for tui.Len() < 1<<20 {
		for row := 1; row <= 24; row++ {
			tui.WriteString("\x1b[" + string(rune('0'+row/10)) + string(rune('0'+row%10)) + ";1H\x1b[1;32m  PID\x1b[m root   20   0  12.3  \x1b[7m0.5\x1b[27m  日本 top\x1b[K")
		}
	}
	for _, bc := range []struct {
		name string
		in   []byte
	}{{"plain", plain}, {"tui", tui.Bytes()}} {
		b.Run(bc.name, func(b *testing.B) {
			e := NewEmulator(120, 40)
			defer e.Close()
			b.SetBytes(int64(len(bc.in)))
			for b.Loop() {
				for p := bc.in; len(p) > 0; {
					k := min(32<<10, len(p))
					e.Write(p[:k])
					p = p[k:]
				}
				e.Snapshot()
			}
		})
	}
}

// newDirectEmulator is the oracle of the holder: every byte goes straight
// to x/vt, in the same writes.
func newDirectEmulator(cols, rows int) *Emulator {
	e := NewEmulator(cols, rows)
	e.hold = nil
	return e
}

// sameScreen feeds chunks to an Emulator and to the oracle, snapshotting
// the Emulator after the writes listed in peeks too, and compares the final
// screens.
func sameScreen(t *testing.T, cols, rows int, chunks [][]byte, peeks map[int]bool) {
	t.Helper()
	e, o := NewEmulator(cols, rows), newDirectEmulator(cols, rows)
	defer e.Close()
	defer o.Close()
	for i, c := range chunks {
		e.Write(c)
		o.Write(c)
		if peeks[i] {
			e.Snapshot()
		}
	}
	if diff := cmp.Diff(o.Snapshot(), e.Snapshot()); diff != "" {
		t.Errorf("%dx%d: held screen differs from direct (-direct +held):\n%s", cols, rows, diff)
	}
}

func TestHolderMatchesDirect(t *testing.T) {
	var logLines, bare, colored, progress, wrapped bytes.Buffer
	for i := range 150 {
		fmt.Fprintf(&logLines, "log line %d of the build %s\r\n", i, strings.Repeat("=", i%70))
		fmt.Fprintf(&bare, "bare %d\n", i)
		fmt.Fprintf(&colored, "\x1b[3%dmcolored\x1b[0m %d\x1b[K\r\n", i%8, i)
		fmt.Fprintf(&progress, "\r%3d%% [%s]", i%101, strings.Repeat("#", i%40))
		if i%10 == 0 {
			progress.WriteString("\r\n")
		}
		fmt.Fprintf(&wrapped, "%s|%d\r\n", strings.Repeat("w", (i*7)%200), i)
	}
	tests := []struct {
		name   string
		prefix string
		body   []byte
		suffix string
	}{
		{"log from the top", "", logLines.Bytes(), ""},
		{"log after a prompt", "\x1b[?2004huser@box:~$ make\r\n\x1b[?2004l\r", logLines.Bytes(), "\x1b[?2004huser@box:~$ "},
		{"log from the middle of the screen", "\x1b[12;30Hhere", logLines.Bytes(), ""},
		{"bare line feeds", "\x1b[5;5H", bare.Bytes(), ""},
		{"colors and erase", "", colored.Bytes(), "\x1b[2A\x1b[Kup two"},
		{"progress bars", "", progress.Bytes(), ""},
		{"long wrapped lines", "", wrapped.Bytes(), ""},
		{"scroll region", "\x1b[2;4r\x1b[3;1H", logLines.Bytes(), "\x1b[r"},
		{"region then reset", "\x1b[2;4r\x1b[r\x1b[3;1H", logLines.Bytes(), ""},
		{"cursor below the region", "\x1b[1;3r\x1b[5;1H", logLines.Bytes(), ""},
		{"alt screen", "\x1b[?1049h", logLines.Bytes(), "\x1b[?1049l"},
		{"inside an osc", "\x1b]0;title ", logLines.Bytes(), "\x07"},
		{"8-bit csi before", "\x9b5;5H", logLines.Bytes(), ""},
		{"wide text", "", bytes.Repeat([]byte("日本語のログ 😀\r\n"), 120), ""},
		{"newline mode", "\x1b[20h", bare.Bytes(), ""},
		{"origin mode and margins", "\x1b[2;4r\x1b[?6h", logLines.Bytes(), ""},
		{"long repeats", "ab\x1b[65535b\r\n日\x1b[40000b\x1b[4l\x1b[?7lz\x1b[3000b", logLines.Bytes(), "x\x1b[65535by"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream := slices.Concat([]byte(tt.prefix), tt.body, []byte(tt.suffix))
			for _, size := range []int{len(stream), 4096, 61, 7} {
				var chunks [][]byte
				for p := stream; len(p) > 0; {
					k := min(size, len(p))
					chunks = append(chunks, p[:k])
					p = p[k:]
				}
				peeks := map[int]bool{len(chunks) / 3: true, len(chunks) / 2: true}
				for _, geom := range [][2]int{{80, 24}, {40, 5}, {200, 1}} {
					if geom[1] < 5 && strings.Contains(tt.prefix, "r\x1b") {
						// Margins past the bottom: x/vt keeps them (and
						// panics on them), the holder cuts them to the screen.
						continue
					}
					sameScreen(t, geom[0], geom[1], chunks, peeks)
				}
			}
		})
	}
}

// TestHolderDrops checks the holder does its job: a long log is not all
// kept for the emulator, and the screen still ends on its last lines.
func TestHolderDrops(t *testing.T) {
	e := NewEmulator(80, 24)
	defer e.Close()
	var fed int
	e.hold.out = func(p []byte) {
		fed += len(p)
		e.batch = append(e.batch, p...)
	}
	var log bytes.Buffer
	for i := range 100000 {
		fmt.Fprintf(&log, "line %d\r\n", i)
	}
	e.Write(log.Bytes())
	if held := len(e.hold.run); held > 4*24*len("line 99999\r\n") {
		t.Errorf("holder keeps %d bytes of a %d-byte log", held, log.Len())
	}
	s := e.Snapshot()
	if s.Lines[22] != "line 99999" || s.Lines[0] != "line 99977" {
		t.Errorf("screen ends with %q ... %q", s.Lines[0], s.Lines[22])
	}
	if fed > log.Len()/100 {
		t.Errorf("the emulator was fed %d of %d bytes", fed, log.Len())
	}
}

// controlInsideEscape reports whether raw has a C0 control inside an ESC or
// CSI sequence, a sequence longer than the holder keeps, or a number it may
// cap, or a string ended by ESC and not ST (x/vt then stays in a DCS and
// swallows what follows; the holder gives it an ST). The holder gives
// such a control to x/vt ahead of the sequence, as a DEC terminal executes
// it, where x/vt itself misparses it (and can spend seconds on the result),
// and drops the excess of an overlong sequence: there the direct emulator
// is no oracle.
func controlInsideEscape(raw []byte) bool {
	for p := raw; len(p) > 0; {
		r, size := utf8.DecodeRune(p)
		if r == utf8.RuneError && size == 1 && p[0] >= 0xc2 && p[0] <= 0xf4 {
			return true // a broken rune: x/vt eats the bytes after it, the holder does not
		}
		p = p[size:]
	}
	const ground, esc, csi, str, strEsc = 0, 1, 2, 3, 4
	state, n, digits, osc := ground, 0, 0, false
	for _, c := range raw {
		n++
		if c >= '0' && c <= '9' {
			digits++
		} else {
			digits = 0
		}
		switch {
		case state == str:
			if c == 0x1b {
				state = strEsc
			} else if c == 0x07 && osc || c == 0x18 || c == 0x1a {
				state = ground
			}
		case state == strEsc:
			if c != '\\' {
				return true // the holder ends the string with an ST here
			}
			state = ground
		case state == csi && digits > 4:
			return true // a number the holder may cap
		case state == csi && c == 'r':
			return true // margins the holder may cut to the screen
		case c == 0x1b:
			state, n = esc, 1
		case c == 0x9b:
			state, n = csi, 1
		case c == 0x90 || c == 0x98 || c == 0x9d || c == 0x9e || c == 0x9f:
			state, osc = str, c == 0x9d
		case state == ground:
		case c < 0x20 && c != 0x18 && c != 0x1a, n >= maxHeldCS:
			return true
		case state == esc && c == '[':
			state = csi
		case state == esc && (c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_'):
			state, osc = str, c == ']'
		case c >= 0x80, c == 0x18, c == 0x1a,
			state == esc && c >= 0x30 && c <= 0x7e,
			state == csi && c >= 0x40 && c <= 0x7e:
			state = ground
		}
	}
	return false
}

// TestEmulatorSurvivesPanics feeds what makes x/vt panic (a reverse index
// under a scroll region reaching past the bottom of the screen): the held
// Emulator never hands x/vt such a region, and the guard keeps even a
// direct one alive, with a fresh screen.
func TestEmulatorSurvivesPanics(t *testing.T) {
	crash := []byte("\x1b[1;24r\x1b[H\x1bM")
	for _, direct := range []bool{false, true} {
		e := NewEmulator(20, 3)
		if direct {
			e.hold = nil
		}
		e.Write([]byte("before"))
		e.Write(crash)
		e.Write([]byte("\x1b[Hafter"))
		s := e.Snapshot()
		if s.Lines[0] != "after" || s.Rows != 3 || s.Cols != 20 {
			t.Errorf("direct=%v: after the crash %dx%d %q; want a working 20x3 screen", direct, s.Cols, s.Rows, s.Lines)
		}
		e.Close()
	}
}

func BenchmarkEmulatorSnapshot(b *testing.B) {
	e := NewEmulator(160, 40)
	defer e.Close()
	for i := range 40 {
		e.Write([]byte(fmt.Sprintf("\x1b[%d;1H\x1b[32mrow %d\x1b[m %s 日本語", i+1, i, strings.Repeat("x", 100))))
	}
	for b.Loop() {
		e.Snapshot()
	}
}

// TestHolderResize checks held text is laid out at the size in force when
// it was written: a resize in the middle of a long log.
func TestHolderResize(t *testing.T) {
	var log bytes.Buffer
	for i := range 200 {
		fmt.Fprintf(&log, "line %d %s\r\n", i, strings.Repeat("-", i%90))
	}
	half := log.Len() / 2
	e, o := NewEmulator(100, 30), newDirectEmulator(100, 30)
	defer e.Close()
	defer o.Close()
	for _, em := range []*Emulator{e, o} {
		em.Write(log.Bytes()[:half])
		em.Resize(40, 10)
		em.Write(log.Bytes()[half:])
		em.Resize(120, 12)
		em.Write([]byte("\x1b[?25hdone"))
	}
	if diff := cmp.Diff(o.Snapshot(), e.Snapshot()); diff != "" {
		t.Errorf("held screen differs from direct (-direct +held):\n%s", diff)
	}
}
