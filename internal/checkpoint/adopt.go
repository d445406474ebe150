package checkpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// The stats of a fork's lower layer. A fork's copy-on-write workspace
// shows, before anything runs in it, exactly the files of the tree the
// host wrote out for its checkpoint, with their inode, ctime, mtime and
// size (an overlay over one file system reports the lower files' own).
// The host stats that tree once for all the forks of one call
// (StatTree) and sends the stats with the adopt; each limbsd then lists
// only its directories, to watch them and to check that they hold the
// names the stats say, instead of stating every path through the
// overlay, ten walks at once on a small machine.
//
// One file of each directory is stated by limbsd and must match its
// stats exactly (inode, device, times): stats of another overlay layout
// make it walk in full, since the tracker finds files open for writing
// by their inode.

// StatTree encodes the stats of every path of the host directory dir, as
// the sandbox's paths under root (relative, as a scan names them): what
// AdoptRequest.Stats carries. Nothing under dir is followed; it is the
// host's own tree (cpstore writes it), so an entry it cannot encode
// (a fifo, a link target over MaxPath) is an error.
func StatTree(dir, root string) ([]byte, error) {
	if !ValidPath(root) {
		return nil, fmt.Errorf("stat tree: root %q is not a clean relative path", root)
	}
	var out []byte
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		name := root
		if rel != "." {
			name = root + "/" + filepath.ToSlash(rel)
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		link := ""
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR, unix.S_IFREG:
		case unix.S_IFLNK:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
			if len(link) > MaxPath {
				return fmt.Errorf("stat tree: %s: a link target over %d bytes", p, MaxPath)
			}
		default:
			return fmt.Errorf("stat tree: %s is neither a file, a directory nor a symlink", p)
		}
		out = appendStat(out, name, keyOf(&st, link), uint64(st.Nlink))
		return nil
	})
	return out, err
}

func appendStat(b []byte, p string, k statKey, nlink uint64) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	b = append(b, p...)
	b = append(b, k.typ)
	for _, v := range []uint64{uint64(k.mode), uint64(k.uid), uint64(k.gid), k.ino, nlink} {
		b = binary.AppendUvarint(b, v)
	}
	for _, v := range []int64{k.size, k.mtime, k.cti} {
		b = binary.AppendVarint(b, v)
	}
	b = binary.AppendUvarint(b, uint64(len(k.link)))
	return append(b, k.link...)
}

var errStats = errors.New("the stats are not a tree's")

// decodeStats reads StatTree's encoding: the table of the paths, their
// names in each directory (sorted), and the files of more than one link.
// Every path must be a ValidPath under root, once, in a directory listed
// before it.
func decodeStats(b []byte, root string, dev uint64) (table, map[string][]string, map[string]uint64, error) {
	t := table{}
	kids := map[string][]string{}
	multi := map[string]uint64{}
	uv := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			b = nil
			return 0
		}
		b = b[n:]
		return v
	}
	sv := func() int64 {
		v, n := binary.Varint(b)
		if n <= 0 {
			b = nil
			return 0
		}
		b = b[n:]
		return v
	}
	str := func(max int) (string, bool) {
		n := uv()
		if b == nil || n > uint64(max) || n > uint64(len(b)) {
			return "", false
		}
		s := string(b[:n])
		b = b[n:]
		return s, true
	}
	for len(b) > 0 {
		p, ok := str(MaxPath)
		if !ok || len(b) == 0 || !ValidPath(p) || !Under(p, root) {
			return nil, nil, nil, errStats
		}
		var k statKey
		k.typ = b[0]
		b = b[1:]
		mode, uid, gid := uv(), uv(), uv()
		k.ino = uv()
		nlink := uv()
		k.size, k.mtime, k.cti = sv(), sv(), sv()
		link, ok := str(MaxPath)
		if !ok || mode > 0o7777 || uid > 1<<32-1 || gid > 1<<32-1 {
			return nil, nil, nil, errStats
		}
		k.mode, k.uid, k.gid, k.link, k.dev = uint32(mode), uint32(uid), uint32(gid), link, dev
		if _, dup := t[p]; dup {
			return nil, nil, nil, errStats
		}
		switch {
		case p == root:
			if k.typ != TypeDir {
				return nil, nil, nil, errStats
			}
		default:
			parent := parentOf(p)
			if pk, ok := t[parent]; !ok || pk.typ != TypeDir {
				return nil, nil, nil, errStats
			}
			kids[parent] = append(kids[parent], p[len(parent)+1:])
		}
		switch k.typ {
		case TypeDir:
			k.size = 0
		case TypeFile:
			if nlink > 1 {
				multi[p] = k.ino
			}
		case TypeSymlink:
		default:
			return nil, nil, nil, errStats
		}
		t[p] = k
	}
	if _, ok := t[root]; !ok {
		return nil, nil, nil, errStats
	}
	for _, names := range kids {
		slices.Sort(names)
	}
	return t, kids, multi, nil
}

// errNotAsStated: a directory of the workspace is not as the stats say.
var errNotAsStated = errors.New("the workspace is not as its stats say")

// adoptStated fills s.next from the stats st of the paths under the root
// abs, listing (and watching) only its directories: each must hold the
// names the stats give it, no more, no fewer, and each directory stated
// is one. A directory's own stat is taken, not trusted; a file's or a
// link's is the stats', with the device of the workspace.
func (s *scanner) adoptStated(abs string, stats []byte) error {
	rel, fd, st, err := openRoot(abs)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	t, kids, multi, err := decodeStats(stats, rel, uint64(st.Dev))
	if err != nil {
		return err
	}
	a := adoption{s: s, t: t, kids: kids}
	s.next[rel] = keyOf(&st, "")
	if err := a.dir(fd, rel, 0); err != nil {
		return err
	}
	if s.track != nil {
		for p, ino := range multi {
			s.track.multi[p] = ino
		}
	}
	return nil
}

type adoption struct {
	s    *scanner
	t    table
	kids map[string][]string
}

func (a *adoption) dir(fd int, rel string, depth int) error {
	s := a.s
	if depth > 256 {
		return fmt.Errorf("%s: directories nested deeper than 256", rel)
	}
	if s.track != nil {
		s.track.watch(fd, rel)
	}
	names, types, err := readTyped(fd)
	if err != nil {
		return fmt.Errorf("listing /%s: %w", rel, err)
	}
	s.listed++
	if s.track != nil {
		s.track.names[rel] = names
	}
	want := a.kids[rel]
	i := 0
	for j, n := range names {
		if s.skip[rel+"/"+n] {
			continue
		}
		if i >= len(want) || want[i] != n || types[j] != a.t[rel+"/"+n].typ {
			return fmt.Errorf("/%s/%s: %w", rel, n, errNotAsStated)
		}
		i++
	}
	if i != len(want) {
		return fmt.Errorf("/%s/%s is missing: %w", rel, want[i], errNotAsStated)
	}
	sampled := false
	for _, n := range want {
		p := rel + "/" + n
		k := a.t[p]
		if k.typ != TypeDir && !sampled {
			// One file or link of each directory is stated here: stats
			// whose inodes or times are not what this kernel reports
			// (another overlay layout) would leave the table unable to
			// match a file open for writing to its path (track.go).
			sampled = true
			var st unix.Stat_t
			if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return fmt.Errorf("stat /%s: %v: %w", p, err, errNotAsStated)
			}
			if got := keyOf(&st, k.link); got != k {
				return fmt.Errorf("/%s is not as stated (inode, device, times or mode): %w", p, errNotAsStated)
			}
		}
		if k.typ != TypeDir {
			if k.typ == TypeFile {
				s.files++
			}
			s.next[p] = k
			continue
		}
		cfd, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening /%s: %v: %w", p, err, errNotAsStated)
		}
		var st unix.Stat_t
		if err = unix.Fstat(cfd, &st); err == nil {
			s.next[p] = keyOf(&st, "")
			err = a.dir(cfd, p, depth+1)
		}
		unix.Close(cfd)
		if err != nil {
			return err
		}
	}
	return nil
}

// readTyped lists the directory fd (which stays open), sorted, with each
// name's type as the directory says it (TypeFile, TypeDir, TypeSymlink,
// or 0 for another kind).
func readTyped(fd int) ([]string, []byte, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, nil, err
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	names, types := make([]string, len(ents)), make([]byte, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
		switch e.Type() {
		case 0:
			types[i] = TypeFile
		case fs.ModeDir:
			types[i] = TypeDir
		case fs.ModeSymlink:
			types[i] = TypeSymlink
		}
	}
	return names, types, nil
}
