package checkpoint

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkScanIncremental is the frozen part of a checkpoint after a
// one-file change: the walk of 10,000 files against the last scan.
func BenchmarkScanIncremental(b *testing.B) {
	root := b.TempDir()
	for d := 0; d < 100; d++ {
		dir := filepath.Join(root, fmt.Sprintf("d%d", d))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := 0; f < 100; f++ {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d.txt", f)), []byte("x"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	scan := func(base table) table {
		s := &scanner{next: make(table, len(base)), base: base, content: true, w: bufio.NewWriter(io.Discard)}
		if err := s.scanRoot(root); err != nil {
			b.Fatal(err)
		}
		return s.next
	}
	last := scan(nil)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		last = scan(last)
	}
}

// TestScanCrossesStatWindows: a directory of more names than one stat
// window, subdirectories among them, is scanned whole and in order.
func TestScanCrossesStatWindows(t *testing.T) {
	root := t.TempDir()
	want := map[string]byte{}
	for i := 0; i < 3*statWindow+7; i++ {
		name := fmt.Sprintf("n%04d", i)
		p := filepath.Join(root, name)
		if i%50 == 0 {
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(p, "in"), []byte("y"), 0o600); err != nil {
				t.Fatal(err)
			}
			want[name], want[name+"/in"] = TypeDir, TypeFile
			continue
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		want[name] = TypeFile
	}
	s := &scanner{next: table{}, w: bufio.NewWriter(io.Discard)}
	if err := s.scanRoot(root); err != nil {
		t.Fatal(err)
	}
	rel := filepath.Clean(root)[1:]
	if len(s.next) != len(want)+1 {
		t.Fatalf("scanned %d paths, want %d", len(s.next), len(want)+1)
	}
	for w, typ := range want {
		k, ok := s.next[rel+"/"+w]
		if !ok {
			t.Fatalf("%s not scanned", w)
		}
		if k.typ != typ {
			t.Fatalf("%s: type %c, want %c", w, k.typ, typ)
		}
	}
}
