package screen

import (
	"bytes"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata from the current output")

func TestClean(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"plain", "hello\nworld\n", "hello\nworld\n"},
		{"empty", "", ""},
		{"crlf", "a\r\nb\r\n", "a\nb\n"},
		{"cr overwrite keeps the longer tail", "abcdef\rxy\n", "xycdef\n"},
		{"progress bar ends as its last state", "10%\r50%\r100%\n", "100%\n"},
		{"erase to end after cr", "downloading...\r\x1b[Kdone\n", "done\n"},
		{"erase to end with explicit 0", "abcdef\r\x1b[0Kx\n", "x\n"},
		{"erase whole line keeps column", "abc\x1b[2Kd\n", "   d\n"},
		{"erase to cursor", "abcdef\x1b[3D\x1b[1K\n", "    ef\n"},
		{"erase to cursor past end", "abc\x1b[1Kd\n", "   d\n"},
		{"erase below acts on the line", "abcdef\x1b[3D\x1b[J\n", "abc\n"},
		{"color", "\x1b[1;31mred\x1b[0m \x1b[38;2;1;2;3mrgb\x1b[m\n", "red rgb\n"},
		{"private csi", "\x1b[?25lhidden cursor\x1b[?25h\n", "hidden cursor\n"},
		{"cursor left", "abcdef\x1b[2DX\n", "abcdXf\n"},
		{"cursor left default one", "abc\x1b[DX\n", "abX\n"},
		{"cursor left stops at zero", "abc\x1b[99DX\n", "Xbc\n"},
		{"cursor right over text", "abcdef\r\x1b[2CX\n", "abXdef\n"},
		{"cursor right past end pads when written", "ab\x1b[3CX\n", "ab   X\n"},
		{"cursor right past end invents nothing", "ab\x1b[3C\n", "ab\n"},
		{"cursor right is bounded", "a\x1b[9999Cb\n", "a" + strings.Repeat(" ", maxPadColumn-1) + "b\n"},
		{"column absolute", "abcdef\x1b[3GX\n", "abXdef\n"},
		{"column default first", "abc\x1b[GX\n", "Xbc\n"},
		{"delete chars", "abcdef\x1b[2G\x1b[2P\n", "adef\n"},
		{"insert blanks", "abcdef\x1b[2G\x1b[2@\n", "a  bcdef\n"},
		{"erase chars", "abcdef\x1b[2G\x1b[3X\n", "a   ef\n"},
		{"inserts are bounded", "ab\x1b[G" + strings.Repeat("\x1b[999@", 5) + "\n", strings.Repeat(" ", maxPadColumn) + "\n"},
		{"backspace", "abc\b\bX\n", "aXc\n"},
		{"backspace stops at zero", "a\b\b\bb\n", "b\n"},
		{"overstrike", "_\bu_\bl\n", "ul\n"},
		{"tab kept", "a\tb\n", "a\tb\n"},
		{"bell and other controls dropped", "a\x07b\x01c\x7fd\x0ee\n", "abcde\n"},
		{"nul kept", "a\x00b\n", "a\x00b\n"},
		{"osc bel", "\x1b]0;title\x07text\n", "text\n"},
		{"osc st", "\x1b]2;title\x1b\\text\n", "text\n"},
		{"osc with utf8 title", "\x1b]0;日本\x07x\n", "x\n"},
		{"dcs", "\x1bPq#0;2;0;0;0\x1b\\x\n", "x\n"},
		{"apc", "\x1b_Gf=100;AAAA\x1b\\x\n", "x\n"},
		{"esc then new escape in string", "\x1b]0;t\x1b[31mx\n", "x\n"},
		{"charset designation", "a\x1b(Bb\n", "ab\n"},
		{"keypad mode", "\x1b=a\x1b>b\n", "ab\n"},
		{"can aborts csi", "\x1b[12\x18x\n", "x\n"},
		{"sub aborts osc", "\x1b]0;t\x1ax\n", "x\n"},
		{"newline inside csi executes", "\x1b[3\n1mx\n", "\nx\n"},
		{"csi cut by garbage prints it", "\x1b[1\xffx\n", "\uFFFDx\n"},
		{"invalid utf8", "a\xffb\n", "a\uFFFDb\n"},
		{"truncated rune at end", "a\xe2\x82", "a\uFFFD\uFFFD"},
		{"truncated rune before ascii", "\xe2\x82a", "\uFFFD\uFFFDa"},
		{"surrogate", "\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"},
		{"raw 8-bit csi", "\x9b31mX\n", "X\n"},
		{"encoded C1 dropped", "[\xc2\x9b]\n", "[]\n"},
		{"wide chars are runes", "日本語\rx\n", "x本語\n"},
		{"wide over ascii", "abc\r日\n", "日bc\n"},
		{"ascii over wide", "日本\rab\n", "ab\n"},
		{"emoji", "😀 ok\n", "😀 ok\n"},
		{"no trailing newline", "partial", "partial"},
		{"bracketed paste toggles", "\x1b[?2004h$ ls\r\n\x1b[?2004l\rfile\r\n", "$ ls\nfile\n"},
		{"save jump restore drops the drawing", "a\x1b7\x1b[24;0fstatus\x1b8b\n", "ab\n"},
		{"save and restore on the same row", "abc\x1b7def\x1b8X\n", "abcXef\n"},
		{"restore onto a finished line is ignored", "abc\x1b7\ndef\x1b8X\n", "abc\ndefX\n"},
		{"jump without save is only dropped", "\x1b[H\x1b[2Jhello\n", "hello\n"},
		{"csi s and u", "abc\x1b[sdef\x1b[uX\n", "abcXef\n"},
		{"cursor up redraws a block", "layer1: 10%\nlayer2: 20%\n\x1b[2A\x1b[2Klayer1: done\n\x1b[2Klayer2: 90%\n", "layer1: done\nlayer2: 90%\n"},
		{"cursor up keeps the column, a line feed goes down", "abcdef\nxyz\x1b[AQ\n", "abcQef\nxyz"},
		{"cursor up to column one", "abcdef\nxyz\x1b[FQ\n", "Qbcdef\nxyz"},
		{"cursor up stops at the oldest line in reach", "one\ntwo\n\x1b[99AX", "Xne\ntwo\n"},
		{"cursor down", "one\ntwo\nthree\x1b[2A\x1b[BX", "one\ntwo  X\nthree"},
		{"line feed above the bottom moves down", "a\nb\nc\x1b[2A\nX", "a\nX\nc"},
		{"erase below", "a\nb\nc\x1b[2A\x1b[J", "a\n\n"},
		{"long lines leave the window sooner", strings.Repeat("y", maxWinBytes/4) + "\n" + strings.Repeat("z", maxWinBytes) + "\nshort\n\x1b[3AX\n", strings.Repeat("y", maxWinBytes/4) + "\n" + strings.Repeat("z", maxWinBytes) + "\nXhort\n"},
		{"cursor up beyond the window", strings.Repeat("l\n", 300) + "\x1b[299AX\n", strings.Repeat("l\n", 300-maxRowsUp-44) + "X\n" + strings.Repeat("l\n", maxRowsUp+43)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Clean([]byte(tt.in))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Clean(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
			if got1 := cleanBytewise(tt.in); got1 != got {
				t.Errorf("byte-by-byte Text = %q, Clean = %q", got1, got)
			}
		})
	}
}

func cleanBytewise(in string) string {
	tx := NewText(0)
	for i := 0; i < len(in); i++ {
		tx.Write([]byte{in[i]})
	}
	out, _, _ := tx.Result()
	return out
}

// TestCleanGolden runs the byte streams of testdata/clean/*.in (real
// programs recorded by capture.sh, and hand-made streams) and compares with
// the .golden files next to them.
func TestCleanGolden(t *testing.T) {
	ins, err := filepath.Glob("testdata/clean/*.in")
	if err != nil || len(ins) == 0 {
		t.Fatalf("no golden inputs in testdata/clean (err %v)", err)
	}
	for _, in := range ins {
		name := strings.TrimSuffix(filepath.Base(in), ".in")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			got := Clean(raw)
			golden := strings.TrimSuffix(in, ".in") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("mismatch (-want +got):\n%s", diff)
			}
			checkSplits(t, raw, 0)
		})
	}
}

func TestTextTruncation(t *testing.T) {
	tests := []struct {
		name      string
		max       int
		in        string
		want      string
		truncated bool
		total     int
	}{
		{"no limit", 0, "abcdef", "abcdef", false, 6},
		{"under", 10, "abc\n", "abc\n", false, 4},
		{"exactly max", 6, "abcdef", "abcdef", false, 6},
		{"max plus one", 6, "abcdefg", "abc\n[... 1 characters omitted ...]\nefg", true, 7},
		{"odd max keeps one more in the tail", 5, "abcdefgh", "ab\n[... 3 characters omitted ...]\nfgh", true, 8},
		{"max one", 1, "abc", "[... 2 characters omitted ...]\nc", true, 3},
		{"newlines count", 4, "a\nb\nc\n", "a\n[... 2 characters omitted ...]\nc\n", true, 6},
		{"cut at line boundaries", 12, "line1\nline2\nline3\nline4\nline5\n", "line1\n[... 18 characters omitted ...]\nline5\n", true, 30},
		{"a tail that starts a line keeps it", 6, "aaaa\nbb\ncc\n", "aaa\n[... 5 characters omitted ...]\ncc\n", true, 11},
		{"multibyte rune at the head cut", 4, "ab日本語xy", "ab\n[... 3 characters omitted ...]\nxy", true, 7},
		{"multibyte rune at the tail cut", 4, "abcde日本", "ab\n[... 3 characters omitted ...]\n日本", true, 7},
		{"all wide", 4, "日本語テキスト", "日本\n[... 3 characters omitted ...]\nスト", true, 7},
		{"pending line in the tail", 6, "1234567890\nprogress 10%\rprogress 99%", "123\n[... 17 characters omitted ...]\n99%", true, 23},
		{"overwrites do not count", 6, "aaaaaaaaaa\rbb\n", "bba\n[... 5 characters omitted ...]\naa\n", true, 11},
		{"long middle", 10, strings.Repeat("x", 100000) + "END\n", "xxxxx\n[... 99994 characters omitted ...]\nxEND\n", true, 100004},
		{"many lines", 10, strings.Repeat("line\n", 10000), "line\n[... 49990 characters omitted ...]\nline\n", true, 50000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, chunk := range []int{0, 1, 3} {
				tx := NewText(tt.max)
				writeChunks(tx, []byte(tt.in), chunk)
				got, truncated, total := tx.Result()
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("chunk %d: output mismatch (-want +got):\n%s", chunk, diff)
				}
				if truncated != tt.truncated || total != tt.total {
					t.Errorf("chunk %d: truncated, total = %v, %d; want %v, %d", chunk, truncated, total, tt.truncated, tt.total)
				}
			}
		})
	}
}

// TestTextResultDoesNotConsume checks that Result can be asked mid-stream,
// even inside a cut rune, and the stream then goes on unchanged.
func TestTextResultDoesNotConsume(t *testing.T) {
	tx := NewText(0)
	tx.Write([]byte("50%\r\xe6\x97"))
	mid, _, _ := tx.Result()
	if diff := cmp.Diff("\uFFFD\uFFFD%", mid); diff != "" {
		t.Errorf("mid-stream Result mismatch (-want +got):\n%s", diff)
	}
	tx.Write([]byte("\xa5!\n"))
	got, _, _ := tx.Result()
	if diff := cmp.Diff("日!%\n", got); diff != "" {
		t.Errorf("final Result mismatch (-want +got):\n%s", diff)
	}
}

// writeChunks writes p in chunks of size n (n <= 0: in one piece).
func writeChunks(tx *Text, p []byte, n int) {
	if n <= 0 {
		tx.Write(p)
		return
	}
	for len(p) > 0 {
		k := min(n, len(p))
		tx.Write(p[:k])
		p = p[k:]
	}
}

// checkSplits asserts the property that how a stream is cut into chunks
// never changes the result: one-byte chunks, every cut in two, and random
// chunks all give what one Write gives.
func checkSplits(t *testing.T, raw []byte, max int) {
	t.Helper()
	result := func(tx *Text) [3]any {
		out, tr, total := tx.Result()
		return [3]any{out, tr, total}
	}
	whole := NewText(max)
	whole.Write(raw)
	want := result(whole)

	bytewise := NewText(max)
	writeChunks(bytewise, raw, 1)
	if diff := cmp.Diff(want, result(bytewise)); diff != "" {
		t.Fatalf("one-byte chunks differ from one write (-want +got):\n%s", diff)
	}
	if len(raw) <= 1024 {
		for cut := 1; cut < len(raw); cut++ {
			tx := NewText(max)
			tx.Write(raw[:cut])
			tx.Write(raw[cut:])
			if diff := cmp.Diff(want, result(tx)); diff != "" {
				t.Fatalf("cut at %d differs from one write (-want +got):\n%s", cut, diff)
			}
		}
	}
	rng := rand.New(rand.NewPCG(uint64(len(raw)), 1))
	for range 20 {
		tx := NewText(max)
		p := raw
		for len(p) > 0 {
			k := min(1+rng.IntN(17), len(p))
			tx.Write(p[:k])
			p = p[k:]
		}
		if diff := cmp.Diff(want, result(tx)); diff != "" {
			t.Fatalf("random chunks differ from one write (-want +got):\n%s", diff)
		}
	}
}

func TestTextSplitInvariance(t *testing.T) {
	inputs := []string{
		"\x1b[31mred\x1b[0m\r\nnext\rX\x1b[K\n",
		"日本語\xe2\x82\x1b]0;t\x07\x9b1m😀\r\x1b[2C\x1b[1K!\n",
		"a\x1b7\x1b[24;0fstatus\x1b8b\nc\x1b[sdef\x1b[uX",
		strings.Repeat("bar \x1b[32m50%\x1b[0m\r\n", 3) + strings.Repeat("\x1b[3A\x1b[2Kbar 1\r\n\x1b[2Kbar 2\r\n\x1b[2Kbar 3\r\n", 20) + strings.Repeat("x\n", 300) + "\x1b[200A\x1b[Jend",
		strings.Repeat("progress \x1b[32m█\x1b[0m 42%\r", 50) + "done\n",
	}
	for i, in := range inputs {
		for _, max := range []int{0, 1, 7, 40} {
			t.Run(strings.Join([]string{string(rune('a' + i)), string(rune('0' + max%10))}, "/"), func(t *testing.T) {
				checkSplits(t, []byte(in), max)
			})
		}
	}
}

func FuzzClean(f *testing.F) {
	for _, s := range []string{"a\r\nb", "\x1b[31mx\x1b[0m", "\xe2\x82\xac\xff", "\x1b]0;t\x07", "abc\x1b[2D\x1b[1K", "\x9b5C", "\x1b7\x1b[Hx\x1b8"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		out := Clean(raw)
		if !utf8.ValidString(out) {
			t.Fatalf("Clean(%q) = %q: not valid UTF-8", raw, out)
		}
		// Nothing is invented: the output never has more characters than
		// the input has bytes plus the bounded padding of cursor moves.
		if n := utf8.RuneCountInString(out); n > len(raw)+maxPadColumn*bytes.Count(raw, []byte{'\n'})+maxPadColumn {
			t.Fatalf("Clean(%q) has %d characters", raw, n)
		}
		if strings.ContainsRune(out, 0x1b) {
			t.Fatalf("Clean(%q) = %q: an ESC survived", raw, out)
		}
	})
}

func FuzzTextSplit(f *testing.F) {
	f.Add([]byte("50%\r100%\r\n\x1b[K"), uint8(3), uint16(10))
	f.Add([]byte("日本語\xe2\x82"), uint8(1), uint16(4))
	f.Add([]byte("\x1b]0;title\x1b\\ok\x9b1m"), uint8(2), uint16(0))
	f.Fuzz(func(t *testing.T, raw []byte, chunk uint8, max uint16) {
		whole := NewText(int(max))
		whole.Write(raw)
		want, wantTr, wantTotal := whole.Result()
		split := NewText(int(max))
		writeChunks(split, raw, int(chunk%16)+1)
		got, tr, total := split.Result()
		if got != want || tr != wantTr || total != wantTotal {
			t.Fatalf("chunks of %d: (%q, %v, %d); one write: (%q, %v, %d)", chunk%16+1, got, tr, total, want, wantTr, wantTotal)
		}
		if !utf8.ValidString(got) {
			t.Fatalf("output %q is not valid UTF-8", got)
		}
		if max > 0 && tr {
			// Head and tail keep their budgets and end (start) at a line
			// boundary unless a single line is longer than the budget.
			const mark = "\uffffNOTE\uffff"
			marked, _, _ := whole.ResultNote(func(int) string { return mark })
			head, tail, ok := strings.Cut(marked, mark)
			head = strings.TrimSuffix(head, "\n")
			tail = strings.TrimPrefix(tail, "\n")
			if !ok || utf8.RuneCountInString(head) > int(max)/2 || utf8.RuneCountInString(tail) > int(max)-int(max)/2 {
				t.Fatalf("truncated output %q: head or tail over its budget of %d", marked, max)
			}
			if i := strings.IndexByte(head, '\n'); i >= 0 && !strings.HasSuffix(marked[:len(head)+1], "\n") {
				t.Fatalf("truncated output %q: head cut inside a line", marked)
			}
		}
		if max > 0 && !tr && utf8.RuneCountInString(got) > int(max) {
			t.Fatalf("untruncated output %q is longer than %d", got, max)
		}
	})
}

func BenchmarkText(b *testing.B) {
	line := []byte("2026-11-30T19:40:33Z INFO building package github.com/limbs-dev/limbs/internal/screen ok\r\n")
	plain := bytes.Repeat(line, (1<<20)/len(line))
	progress := bytes.Repeat([]byte("\r\x1b[K\x1b[32m███████\x1b[0m 42% 1.2 MB/s eta 0:00:03"), (1<<20)/64)
	utf := bytes.Repeat([]byte("日本語のテキストとemoji 😀 mixed with ascii text\n"), (1<<20)/64)
	for _, bc := range []struct {
		name string
		in   []byte
		max  int
	}{
		{"plain", plain, 0},
		{"plain-max30000", plain, 30000},
		{"progress", progress, 30000},
		{"utf8", utf, 0},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.in)))
			for b.Loop() {
				tx := NewText(bc.max)
				for p := bc.in; len(p) > 0; {
					k := min(32<<10, len(p)) // PTY reads are at most a few KiB
					tx.Write(p[:k])
					p = p[k:]
				}
				tx.Result()
			}
		})
	}
	b.Run("Clean", func(b *testing.B) {
		b.SetBytes(int64(len(plain)))
		for b.Loop() {
			Clean(plain)
		}
	})
}

// TestCleanDropsAltScreen: what a full-screen program draws on the
// alternate screen (vim's rows of ~, less's pages) is gone once it
// switches back, as on a terminal; the text around it stays.
func TestCleanDropsAltScreen(t *testing.T) {
	vim := "\x1b[?1049h\x1b[22;0;0t\x1b[?1h\x1b=\x1b[H\x1b[2J" + strings.Repeat("~"+strings.Repeat(" ", 79)+"\r\n", 23) +
		"\x1b[24;1H\"f\" [New]\x1b[1;1H\x1b[?25h\x1b[?1l\x1b>\x1b[?1049l\x1b[23;0;0t"
	for _, tc := range []struct{ name, in, want string }{
		{"vim", "before\n" + vim + "after\n", "before\nafter\n"},
		{"mode 47", "a\n\x1b[?47hdrawn\r\n\x1b[?47lb\n", "a\nb\n"},
		{"other private modes stay plain", "\x1b[?25lx\x1b[?25h\n", "x\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Clean([]byte(tc.in)); got != tc.want {
				t.Errorf("Clean = %q, want %q", got, tc.want)
			}
		})
	}
}
