package files

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/limbs-dev/limbs/internal/wire"
)

func (s *Server) serveGetArchive(w http.ResponseWriter, r *http.Request) error {
	root, err := s.queryPath(r)
	if err != nil {
		return err
	}
	fi, err := os.Stat(root)
	if err != nil {
		return statErr(root, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory; fetch a single file with GET /v1/files: %w", root, wire.ErrBadRequest)
	}
	w.Header().Set("Content-Type", "application/x-tar")
	w.WriteHeader(http.StatusOK)
	if err := WriteTar(w, root); err != nil {
		// The status is out already: cut the stream so the client sees a
		// broken archive rather than a short, valid-looking one.
		s.log.Warn("archive stream cut", "path", root, "err", err)
		panic(http.ErrAbortHandler)
	}
	return nil
}

// WriteTar streams the tree under root as a tar with names relative to
// root. Symlinks are stored as symlinks, never followed; sockets, fifos and
// devices are left out. The CLI uses it too, to upload a directory.
func WriteTar(w io.Writer, root string) error {
	// root itself is followed when it is a symlink (the caller named it);
	// WalkDir would not descend into it.
	if real, err := filepath.EvalSymlinks(root); err == nil {
		root = real
	}
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			if p == root {
				return err
			}
			return nil // vanished or unreadable: leave it out
		}
		if p == root {
			return nil
		}
		fi, err := de.Info()
		if err != nil {
			return nil
		}
		link := ""
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return nil
			}
		case fi.IsDir(), fi.Mode().IsRegular():
		default:
			return nil
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		if !fi.Mode().IsRegular() {
			return tw.WriteHeader(hdr)
		}
		f, err := os.Open(p)
		if err != nil {
			return nil
		}
		defer f.Close()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		n, err := io.Copy(tw, io.LimitReader(f, hdr.Size))
		if err != nil {
			return err
		}
		if n < hdr.Size {
			// Shrunk while being read: pad, as GNU tar does, so the
			// archive stays well formed.
			_, err = io.CopyN(tw, zeros{}, hdr.Size-n)
		}
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func (s *Server) servePutArchive(w http.ResponseWriter, r *http.Request) error {
	root, err := s.queryPath(r)
	if err != nil {
		return err
	}
	if err := ExtractTar(root, r.Body, filepath.Join(s.opts.StateDir, "tmp")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// ExtractTar unpacks the tar in body under root, creating root when
// missing. The archive is spooled to a file in spoolDir and checked whole
// first, so that one entry that would land outside root (through .., an
// absolute name, a symlink or a hard link) refuses all of it, with an
// error wrapping wire.ErrBadRequest that names the entry, before anything
// is written; the second pass checks every entry again against the disk
// as it then is. The CLI uses it too, since a sandbox's archive is no more
// trusted on the host.
func ExtractTar(root string, body io.Reader, spoolDir string) error {
	return ExtractTarWith(root, body, spoolDir, ExtractOptions{})
}

// ExtractOptions change how ExtractTarWith treats an archive.
type ExtractOptions struct {
	// Untrusted is for an archive a sandbox made, extracted on the host
	// (`limbs cp` out of a sandbox): modes keep their permission bits only
	// (no setuid, setgid or sticky), nothing is chowned (what is written
	// belongs to the user extracting), and an entry whose path goes
	// through a symlink, whether the archive made it or it was at the
	// destination already, refuses the whole archive.
	Untrusted bool
	// Skipped, when set, hears of every entry not extracted (device
	// nodes, fifos) and why.
	Skipped func(name, why string)
}

// mkdirAll creates dir and its parents: owned like their parent (limbsd
// running as root writes for the workspace's owner), or, for an untrusted
// archive, by the user extracting.
func (o ExtractOptions) mkdirAll(dir string) error {
	if o.Untrusted {
		return os.MkdirAll(dir, 0o755)
	}
	return mkdirAllOwned(dir)
}

// ExtractTarWith is ExtractTar with options.
func ExtractTarWith(root string, body io.Reader, spoolDir string, opts ExtractOptions) error {
	if err := opts.mkdirAll(root); err != nil {
		return err
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return statErr(root, err)
	}
	if err := os.MkdirAll(spoolDir, 0o700); err != nil {
		return fmt.Errorf("spooling archive: %w", err)
	}
	spool, err := os.CreateTemp(spoolDir, "archive-*.tar")
	if err != nil {
		return fmt.Errorf("spooling archive: %w", err)
	}
	defer func() {
		spool.Close()
		os.Remove(spool.Name())
	}()
	if _, err := io.Copy(spool, body); err != nil {
		return fmt.Errorf("reading the archive for %s: %v; the upload was cut, nothing was extracted: %w", root, err, wire.ErrBadRequest)
	}

	x := &extractor{root: root, realRoot: realRoot, planned: map[string]node{}, opts: opts}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := x.run(tar.NewReader(spool), true); err != nil {
		return err
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return x.run(tar.NewReader(spool), false)
}

// skipWhy says why an entry of that type is not extracted.
var skipWhy = map[byte]string{
	tar.TypeChar:  "a character device node; only files, directories and links are extracted",
	tar.TypeBlock: "a block device node; only files, directories and links are extracted",
	tar.TypeFifo:  "a fifo; only files, directories and links are extracted",
}

// node is what a path inside the extraction root is, on disk or as the
// archive will leave it.
type node struct {
	kind   byte // 0 (absent), 'd', 'f', 'l'
	target string
}

type extractor struct {
	root     string // as the caller named it, for messages
	realRoot string // with symlinks resolved, where writing happens
	// planned is what the entries checked so far will create, keyed by
	// resolved relative path; it overlays the disk in the checking pass.
	planned map[string]node
	dry     bool
	opts    ExtractOptions
}

func (x *extractor) refuse(name, why string) error {
	return fmt.Errorf("archive entry %q would land outside %s (%s); nothing was extracted: %w", name, x.root, why, wire.ErrBadRequest)
}

func (x *extractor) lookup(rel string) node {
	if x.dry {
		if n, ok := x.planned[rel]; ok {
			return n
		}
	}
	fi, err := os.Lstat(filepath.Join(x.realRoot, filepath.FromSlash(rel)))
	if err != nil {
		return node{}
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		t, _ := os.Readlink(filepath.Join(x.realRoot, filepath.FromSlash(rel)))
		return node{kind: 'l', target: t}
	case fi.IsDir():
		return node{kind: 'd'}
	default:
		return node{kind: 'f'}
	}
}

// resolveDir follows rel (slash separated, relative to the root) through
// every symlink in it, on disk or planned, and returns the path it really
// names, relative to the root. It fails when that path leaves the root.
func (x *extractor) resolveDir(rel string) (string, error) {
	var cur []string
	queue := strings.Split(rel, "/")
	hops := 0
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(cur) == 0 {
				return "", errors.New("through a symlink that climbs out")
			}
			cur = cur[:len(cur)-1]
			continue
		}
		next := path.Join(path.Join(cur...), c)
		n := x.lookup(next)
		switch n.kind {
		case 'l':
			if x.opts.Untrusted {
				return "", fmt.Errorf("through the symlink %s, which is never followed in an archive from a sandbox", next)
			}
			hops++
			if hops > 40 {
				return "", errors.New("too many levels of symlinks")
			}
			t := n.target
			if filepath.IsAbs(t) {
				relT, ok := within(x.realRoot, t)
				if !ok {
					relT, ok = within(x.root, t)
				}
				if !ok {
					return "", fmt.Errorf("through symlink %s -> %s", next, t)
				}
				cur = nil
				t = relT
			}
			queue = append(strings.Split(filepath.ToSlash(t), "/"), queue...)
		case 'f':
			return "", fmt.Errorf("%s is a file, not a directory", next)
		default:
			cur = append(cur, c)
		}
	}
	return path.Join(cur...), nil
}

// within returns p relative to root when p is root or under it.
func within(root, p string) (string, bool) {
	rel, err := filepath.Rel(root, filepath.Clean(p))
	if err != nil || !filepath.IsLocal(rel) && rel != "." {
		return "", false
	}
	if rel == "." {
		rel = ""
	}
	return filepath.ToSlash(rel), true
}

// entryPath checks an entry name and returns its resolved parent and base.
func (x *extractor) entryPath(name string) (dir, base string, err error) {
	clean := strings.TrimSuffix(strings.TrimPrefix(name, "./"), "/")
	if clean == "" || clean == "." {
		return "", "", nil
	}
	if strings.HasPrefix(name, "/") {
		return "", "", x.refuse(name, "an absolute path")
	}
	if !filepath.IsLocal(filepath.FromSlash(clean)) {
		return "", "", x.refuse(name, "it climbs out with ..")
	}
	dir, err = x.resolveDir(path.Dir(clean))
	if err != nil {
		return "", "", x.refuse(name, err.Error())
	}
	return dir, path.Base(clean), nil
}

func (x *extractor) run(tr *tar.Reader, dry bool) error {
	x.dry = dry
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("the archive for %s is not a valid tar (%v); nothing more was extracted: %w", x.root, err, wire.ErrBadRequest)
		}
		switch hdr.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			if !dry && x.opts.Skipped != nil {
				x.opts.Skipped(hdr.Name, skipWhy[hdr.Typeflag])
			}
			continue
		default:
			continue // pax globals, GNU extensions: nothing to write
		}
		dir, base, err := x.entryPath(hdr.Name)
		if err != nil {
			return err
		}
		if base == "" {
			continue // the root itself
		}
		rel := path.Join(dir, base)
		var linkSrc string
		if hdr.Typeflag == tar.TypeLink {
			ldir, lbase, err := x.entryPath(hdr.Linkname)
			if err != nil || lbase == "" {
				return x.refuse(hdr.Name, fmt.Sprintf("a hard link to %q, which is not inside it", hdr.Linkname))
			}
			linkSrc = path.Join(ldir, lbase)
			if n := x.lookup(linkSrc); n.kind != 'f' && n.kind != 'l' {
				return x.refuse(hdr.Name, fmt.Sprintf("a hard link to %q, which is not a file inside it", hdr.Linkname))
			}
		}
		if dry {
			switch hdr.Typeflag {
			case tar.TypeDir:
				x.planned[rel] = node{kind: 'd'}
			case tar.TypeSymlink:
				x.planned[rel] = node{kind: 'l', target: hdr.Linkname}
			default:
				x.planned[rel] = node{kind: 'f'}
			}
			continue
		}
		if err := x.write(hdr, tr, dir, rel, linkSrc); err != nil {
			return fmt.Errorf("extracting %q under %s: %w (the entries before it were extracted)", hdr.Name, x.root, err)
		}
	}
}

// write creates one checked entry. Whatever sits at its place is replaced
// (a symlink there is replaced, never written through), except a
// non-empty directory.
func (x *extractor) write(hdr *tar.Header, tr io.Reader, dir, rel, linkSrc string) error {
	parent := filepath.Join(x.realRoot, filepath.FromSlash(dir))
	if err := x.opts.mkdirAll(parent); err != nil {
		return err
	}
	dst := filepath.Join(x.realRoot, filepath.FromSlash(rel))
	uid, gid := -1, -1
	if pi, err := os.Stat(parent); err == nil {
		uid, gid = owner(pi)
	}
	chown := func(p string) {
		if os.Geteuid() == 0 && uid >= 0 && !x.opts.Untrusted {
			_ = os.Lchown(p, uid, gid)
		}
	}
	mode := unixMode(uint32(hdr.Mode) & 0o7777)
	if x.opts.Untrusted {
		mode = unixMode(uint32(hdr.Mode) & 0o777)
	}
	cur, statErr := os.Lstat(dst)
	exists := statErr == nil
	if exists && cur.IsDir() && hdr.Typeflag == tar.TypeDir {
		return os.Chmod(dst, mode)
	}
	if exists && cur.IsDir() {
		if err := os.Remove(dst); err != nil {
			return fmt.Errorf("a directory is in the way and is not empty: %w", wire.ErrBadRequest)
		}
		exists = false
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if exists {
			if err := os.Remove(dst); err != nil {
				return err
			}
		}
		if err := os.Mkdir(dst, 0o700); err != nil {
			return err
		}
		chown(dst)
		return os.Chmod(dst, mode)
	case tar.TypeSymlink:
		if exists {
			if err := os.Remove(dst); err != nil {
				return err
			}
		}
		if err := os.Symlink(hdr.Linkname, dst); err != nil {
			return err
		}
		chown(dst)
		return nil
	case tar.TypeLink:
		if exists {
			if err := os.Remove(dst); err != nil {
				return err
			}
		}
		return os.Link(filepath.Join(x.realRoot, filepath.FromSlash(linkSrc)), dst)
	}
	tmp, err := os.CreateTemp(parent, "."+filepath.Base(dst)+".limbs-*")
	if err != nil {
		return err
	}
	if _, err := io.Copy(tmp, tr); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	chown(tmp.Name())
	if err := os.Chmod(tmp.Name(), mode); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if !hdr.ModTime.IsZero() {
		_ = os.Chtimes(tmp.Name(), hdr.ModTime, hdr.ModTime)
	}
	// Rename replaces a symlink at dst itself, never what it points to.
	if err := os.Rename(tmp.Name(), dst); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}
