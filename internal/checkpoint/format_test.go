package checkpoint

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func entryLine(e Entry, flag byte) string { return string(AppendEntry(nil, &e, flag)) }

// TestReaderRefuses: what a hostile limbsd may send is refused, with an
// error wrapping ErrInvalid (or a cut stream's io.ErrUnexpectedEOF).
func TestReaderRefuses(t *testing.T) {
	lim := Limits{MaxEntries: 3, MaxFile: 10, MaxTotal: 15, MaxLine: 3*MaxPath + 256, MaxState: 64}
	ok := Entry{Path: "workspace/a", Type: TypeFile, Mode: 0o644, Size: 3}
	cases := map[string]string{
		"dotdot":       entryLine(Entry{Path: "workspace/../etc/passwd", Type: TypeFile}, FlagMeta),
		"absolute":     entryLine(Entry{Path: "/etc/passwd", Type: TypeFile}, FlagMeta),
		"nul":          entryLine(Entry{Path: "workspace/a\x00b", Type: TypeFile}, FlagMeta),
		"dot":          entryLine(Entry{Path: "workspace/./a", Type: TypeFile}, FlagMeta),
		"empty":        entryLine(Entry{Path: "", Type: TypeFile}, FlagMeta),
		"long name":    entryLine(Entry{Path: "w/" + strings.Repeat("x", 256), Type: TypeFile}, FlagMeta),
		"big file":     entryLine(Entry{Path: "w/a", Type: TypeFile, Size: 11}, FlagContent) + strings.Repeat("x", 11),
		"total":        entryLine(Entry{Path: "w/a", Type: TypeFile, Size: 8}, FlagContent) + "12345678" + entryLine(Entry{Path: "w/b", Type: TypeFile, Size: 8}, FlagContent) + "12345678",
		"entries":      strings.Repeat(entryLine(ok, FlagMeta), 4),
		"dir content":  entryLine(Entry{Path: "w/d", Type: TypeDir, Size: 1}, FlagContent) + "x",
		"link no tgt":  entryLine(Entry{Path: "w/l", Type: TypeSymlink}, FlagMeta),
		"file tgt":     entryLine(Entry{Path: "w/f", Type: TypeFile, Link: "x"}, FlagMeta),
		"bad type":     "E x 644 0 0 0 0 m - \"w/a\" \"\"\n",
		"bad mode":     "E f 17777 0 0 0 0 m - \"w/a\" \"\"\n",
		"neg size":     "E f 644 0 0 -1 0 m - \"w/a\" \"\"\n",
		"bad hash":     "E f 644 0 0 0 0 m zz \"w/a\" \"\"\n",
		"trailing":     "E f 644 0 0 0 0 m - \"w/a\" \"\" junk\n",
		"kind":         "Q {}\n",
		"state line":   "S " + strings.Repeat("x", 100) + "\n",
		"cut":          entryLine(ok, FlagContent) + "ab",
		"no trailer":   entryLine(ok, FlagMeta),
		"removed path": "D \"../x\"\n",
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			r := NewReader(strings.NewReader(in+"Z {}\n"), lim)
			if name == "cut" || name == "no trailer" {
				r = NewReader(strings.NewReader(in), lim)
			}
			var err error
			for range 10 {
				if _, err = r.Next(); err != nil {
					break
				}
			}
			if err == nil || err == io.EOF {
				t.Fatalf("accepted: %q", in)
			}
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("error %v wraps neither ErrInvalid nor io.ErrUnexpectedEOF", err)
			}
		})
	}
}

// TestReaderRoundTrip: what AppendEntry writes reads back the same, content
// included, whatever bytes a name holds.
func TestReaderRoundTrip(t *testing.T) {
	es := []Entry{
		{Path: "workspace", Type: TypeDir, Mode: 0o755, UID: 1000, GID: 1000, Mtime: 1},
		{Path: "workspace/new\nline \"q\" \xff", Type: TypeFile, Mode: 0o4755, Size: 5, Mtime: -5},
		{Path: "workspace/l", Type: TypeSymlink, Mode: 0o777, Link: "../../etc/passwd", Hash: strings.Repeat("a", 64)},
	}
	var b []byte
	b = AppendEntry(b, &es[0], FlagMeta)
	b = AppendEntry(b, &es[1], FlagContent)
	b = append(b, "hello"...)
	b = AppendEntry(b, &es[2], FlagMeta)
	b = AppendRemoved(b, "workspace/gone")
	b = AppendJSON(b, KindEnd, []byte(`{"x":1}`))
	r := NewReader(strings.NewReader(string(b)), DefaultLimits)
	for i, want := range es {
		rec, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if rec.Entry != want {
			t.Fatalf("entry %d: %+v, want %+v", i, rec.Entry, want)
		}
		if i == 1 {
			got, _ := io.ReadAll(r.Content())
			if string(got) != "hello" {
				t.Fatalf("content %q", got)
			}
		}
	}
	if rec, err := r.Next(); err != nil || rec.Kind != KindRemoved || rec.Entry.Path != "workspace/gone" {
		t.Fatalf("removed: %+v %v", rec, err)
	}
	if rec, err := r.Next(); err != nil || rec.Kind != KindEnd {
		t.Fatalf("end: %+v %v", rec, err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("after the end: %v", err)
	}
}

// FuzzReader: no stream makes the reader panic or accept an invalid path.
func FuzzReader(f *testing.F) {
	e := Entry{Path: "workspace/a", Type: TypeFile, Mode: 0o644, Size: 2}
	f.Add(entryLine(e, FlagContent) + "hiZ {}\n")
	f.Add("D \"workspace/x\"\nS []\nZ {}\n")
	f.Fuzz(func(t *testing.T, in string) {
		r := NewReader(strings.NewReader(in), Limits{MaxEntries: 100, MaxFile: 1 << 10, MaxTotal: 1 << 12, MaxLine: 1 << 12, MaxState: 1 << 12})
		for range 200 {
			rec, err := r.Next()
			if err != nil {
				return
			}
			if (rec.Kind == KindEntry || rec.Kind == KindRemoved) && !ValidPath(rec.Entry.Path) {
				t.Fatalf("accepted path %q", rec.Entry.Path)
			}
			_, _ = io.Copy(io.Discard, r.Content())
		}
	})
}
