package cpstore

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/limbs-dev/limbs/internal/checkpoint"
)

// BenchmarkTree writes the tree of a checkpoint of 10,000 small files in
// 100 directories and one of 100 MiB, as a fork of it does first; and
// ingests the scan of it, as its first checkpoint does.
func BenchmarkTree(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("a tree gives every path its owner: it needs root")
	}
	st, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	entries := []checkpoint.Entry{{Path: "workspace", Type: checkpoint.TypeDir, Mode: 0o755}}
	content := map[string]string{}
	for d := range 100 {
		dp := fmt.Sprintf("workspace/d%d", d)
		entries = append(entries, checkpoint.Entry{Path: dp, Type: checkpoint.TypeDir, Mode: 0o755})
		for f := range 100 {
			p := fmt.Sprintf("%s/f%d.txt", dp, f)
			c := fmt.Sprintf("line one of %d\nfile %d in d%d\nend\n", f, f, d)
			content[p] = c
			entries = append(entries, checkpoint.Entry{Path: p, Type: checkpoint.TypeFile, Mode: 0o644, Size: int64(len(c))})
		}
	}
	big := string(bytes.Repeat([]byte("x"), 100<<20))
	content["workspace/big"] = big
	entries = append(entries, checkpoint.Entry{Path: "workspace/big", Type: checkpoint.TypeFile, Mode: 0o644, Size: int64(len(big))})
	flags := bytes.Repeat([]byte{checkpoint.FlagContent}, len(entries))
	for i, e := range entries {
		if e.Type == checkpoint.TypeDir {
			flags[i] = checkpoint.FlagMeta
		}
	}
	scan := hostileScan(b, entries, flags, content)
	b.Run("ingest", func(b *testing.B) {
		b.SetBytes(int64(len(scan)))
		for range b.N {
			st, err := Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			if _, err := st.Ingest(bytes.NewReader(scan), nil, checkpoint.DefaultLimits); err != nil {
				b.Fatal(err)
			}
		}
	})
	ing, err := st.Ingest(bytes.NewReader(scan), nil, checkpoint.DefaultLimits)
	if err != nil {
		b.Fatal(err)
	}
	m := ing.Manifest
	b.ResetTimer()
	for i := range b.N {
		m.Meta.Sandbox, m.Meta.ID = "sb_bench", fmt.Sprintf("cp_bench%d", i)
		if _, _, err := st.Tree(m); err != nil {
			b.Fatal(err)
		}
	}
}
