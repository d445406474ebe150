package checkpoint

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkStatTree states a tree of 10,000 files in 100 directories,
// as limbs serve does once per fork call, and decodes the stats, as each
// fork's limbsd does.
func BenchmarkStatTree(b *testing.B) {
	dir := b.TempDir()
	for d := range 100 {
		dp := filepath.Join(dir, fmt.Sprintf("d%d", d))
		if err := os.Mkdir(dp, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 100 {
			if err := os.WriteFile(filepath.Join(dp, fmt.Sprintf("f%d.txt", f)), []byte("x"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("stat", func(b *testing.B) {
		for range b.N {
			if _, err := StatTree(dir, "workspace"); err != nil {
				b.Fatal(err)
			}
		}
	})
	stats, err := StatTree(dir, "workspace")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(stats)))
		for range b.N {
			if _, _, _, err := decodeStats(stats, "workspace", 1); err != nil {
				b.Fatal(err)
			}
		}
	})
}
