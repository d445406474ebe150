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
		s := &scanner{next: table{}, base: base, content: true, w: bufio.NewWriter(io.Discard)}
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
