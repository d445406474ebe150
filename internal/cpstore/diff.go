package cpstore

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/pmezard/go-difflib/difflib"

	"github.com/limbs-dev/limbs/internal/checkpoint"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Bounds of a diff's text: files larger than maxDiffFile are named, not
// shown; the whole text stops at maxDiffText.
const (
	maxDiffFile = 1 << 20
	maxDiffText = 4 << 20
)

// Diff compares a with b: paths added, changed (type, content, mode or
// link target; a new mtime alone is no change) and removed, as absolute
// paths, and a unified diff of the text files among them.
func (s *Store) Diff(a, b *Manifest) wire.Diff {
	d := wire.Diff{From: a.Meta.ID, To: b.Meta.ID, Added: []string{}, Changed: []string{}, Removed: []string{}}
	ai, bi := a.Index(), b.Index()
	var text strings.Builder
	show := func(p string, x, y *checkpoint.Entry) {
		if text.Len() >= maxDiffText {
			return
		}
		xs, xok := s.text(x)
		ys, yok := s.text(y)
		if !xok || !yok {
			if (x != nil && x.Type == checkpoint.TypeFile) || (y != nil && y.Type == checkpoint.TypeFile) {
				fmt.Fprintf(&text, "Binary or large file /%s differs\n", p)
			}
			return
		}
		from, to := "a/"+p, "b/"+p
		if x == nil {
			from = "/dev/null"
		}
		if y == nil {
			to = "/dev/null"
		}
		u, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{A: difflib.SplitLines(xs), B: difflib.SplitLines(ys), FromFile: from, ToFile: to, Context: 3})
		if err == nil {
			text.WriteString(u)
		}
	}
	for _, e := range b.Entries {
		x, ok := ai[e.Path]
		switch {
		case !ok:
			d.Added = append(d.Added, "/"+e.Path)
			show(e.Path, nil, bi[e.Path])
		case x.Type != e.Type || x.Hash != e.Hash || x.Mode != e.Mode || x.Link != e.Link || x.Type == checkpoint.TypeFile && x.Size != e.Size:
			d.Changed = append(d.Changed, "/"+e.Path)
			if x.Hash != e.Hash {
				show(e.Path, x, bi[e.Path])
			}
		}
	}
	for _, e := range a.Entries {
		if _, ok := bi[e.Path]; !ok {
			d.Removed = append(d.Removed, "/"+e.Path)
			show(e.Path, ai[e.Path], nil)
		}
	}
	sort.Strings(d.Removed)
	if text.Len() >= maxDiffText {
		text.WriteString("... the diff is cut here (over 4 MiB)\n")
	}
	d.Diff = text.String()
	return d
}

// text returns the content of a small text file entry ("" for nil or a
// non-file, which diffs as empty).
func (s *Store) text(e *checkpoint.Entry) (string, bool) {
	if e == nil {
		return "", true
	}
	if e.Type != checkpoint.TypeFile {
		return "", false
	}
	if e.Size > maxDiffFile || e.Hash == "" {
		return "", false
	}
	f, err := s.OpenBlob(e.Hash)
	if err != nil {
		return "", false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxDiffFile+1))
	if err != nil || !isText(b) {
		return "", false
	}
	return string(b), true
}
