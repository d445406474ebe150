// Package checkpoint moves a sandbox's files between its limbsd and the
// control plane's checkpoint store: limbsd's side (Daemon) freezes the
// sandbox's processes, walks the asked-for roots without following a
// symlink and streams what changed since the previous scan; it applies a
// restore stream the same way. The stream format (this file) is shared
// with the host, which reads it as hostile input (Reader).
//
// It must never follow a symlink in the sandbox, never leave a process of
// the sandbox stopped (a thaw runs on every way out, panics included), and
// never import more than the standard library and x/sys: it is linked into
// limbsd.
//
// Concurrency: Daemon.mu serialises scans and restores of one daemon and
// guards its cache and hold; nothing else is shared.
package checkpoint

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
)

// Entry types.
const (
	TypeFile    = 'f'
	TypeDir     = 'd'
	TypeSymlink = 'l'
)

// Flags of an entry record.
const (
	FlagContent = 'c' // Size bytes of content follow the line
	FlagMeta    = 'm' // no content: a dir, a link, or a scan without content
	FlagKeep    = 'k' // restore: the file in place already has this content
)

// Entry is one file, directory or symlink. Path is relative to "/"
// ("workspace/a.txt"); Mode holds the permission, set-id and sticky bits;
// Mtime is in nanoseconds since the epoch; Hash, the sha256 of a file's
// content in hex, is the host's (a scan never carries one).
type Entry struct {
	Path  string
	Type  byte
	Mode  uint32
	UID   int
	GID   int
	Size  int64
	Mtime int64
	Link  string
	Hash  string
}

// ErrInvalid marks a stream that breaks the format or a limit.
var ErrInvalid = errors.New("invalid checkpoint stream")

// MaxPath is the longest path or link target a stream may carry.
const MaxPath = 4096

// ValidPath reports whether p is a clean relative path with no "..", no
// NUL and no component longer than 255 bytes.
func ValidPath(p string) bool {
	if p == "" || len(p) > MaxPath || p[0] == '/' || strings.IndexByte(p, 0) >= 0 || path.Clean(p) != p || p == "." {
		return false
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." || c == "." || c == "" || len(c) > 255 {
			return false
		}
	}
	return true
}

// Under reports whether p is root or inside it (both relative).
func Under(p, root string) bool {
	return p == root || strings.HasPrefix(p, root+"/")
}

// AppendEntry appends e's record line (with its trailing newline).
func AppendEntry(b []byte, e *Entry, flag byte) []byte {
	b = append(b, 'E', ' ', e.Type, ' ')
	b = strconv.AppendUint(b, uint64(e.Mode), 8)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(e.UID), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(e.GID), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.Size, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.Mtime, 10)
	b = append(b, ' ', flag, ' ')
	if e.Hash == "" {
		b = append(b, '-')
	} else {
		b = append(b, e.Hash...)
	}
	b = append(b, ' ')
	b = strconv.AppendQuote(b, e.Path)
	b = append(b, ' ')
	b = strconv.AppendQuote(b, e.Link)
	return append(b, '\n')
}

// parseEntry parses the fields after "E ".
func parseEntry(s string) (Entry, byte, error) {
	var e Entry
	f := make([]string, 0, 8)
	for i := 0; i < 8; i++ {
		j := strings.IndexByte(s, ' ')
		if j < 0 {
			return e, 0, fmt.Errorf("an entry line has too few fields: %w", ErrInvalid)
		}
		f = append(f, s[:j])
		s = s[j+1:]
	}
	if len(f[0]) != 1 || (f[0][0] != TypeFile && f[0][0] != TypeDir && f[0][0] != TypeSymlink) {
		return e, 0, fmt.Errorf("entry type %q: %w", f[0], ErrInvalid)
	}
	e.Type = f[0][0]
	mode, err := strconv.ParseUint(f[1], 8, 32)
	if err != nil || mode&^0o7777 != 0 {
		return e, 0, fmt.Errorf("entry mode %q: %w", f[1], ErrInvalid)
	}
	e.Mode = uint32(mode)
	uid, err1 := strconv.ParseInt(f[2], 10, 32)
	gid, err2 := strconv.ParseInt(f[3], 10, 32)
	size, err3 := strconv.ParseInt(f[4], 10, 64)
	mt, err4 := strconv.ParseInt(f[5], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || uid < 0 || gid < 0 || size < 0 {
		return e, 0, fmt.Errorf("entry numbers %q: %w", f[2:6], ErrInvalid)
	}
	e.UID, e.GID, e.Size, e.Mtime = int(uid), int(gid), size, mt
	if len(f[6]) != 1 || (f[6][0] != FlagContent && f[6][0] != FlagMeta && f[6][0] != FlagKeep) {
		return e, 0, fmt.Errorf("entry flag %q: %w", f[6], ErrInvalid)
	}
	flag := f[6][0]
	if f[7] != "-" {
		if len(f[7]) != 64 || strings.Trim(f[7], "0123456789abcdef") != "" {
			return e, 0, fmt.Errorf("entry hash %q: %w", f[7], ErrInvalid)
		}
		e.Hash = f[7]
	}
	q, err := strconv.QuotedPrefix(s)
	if err != nil {
		return e, 0, fmt.Errorf("entry path: %w", ErrInvalid)
	}
	if e.Path, err = strconv.Unquote(q); err != nil {
		return e, 0, fmt.Errorf("entry path: %w", ErrInvalid)
	}
	s = s[len(q):]
	if len(s) < 3 || s[0] != ' ' {
		return e, 0, fmt.Errorf("entry %q has no link field: %w", e.Path, ErrInvalid)
	}
	q, err = strconv.QuotedPrefix(s[1:])
	if err != nil || len(q) != len(s)-1 {
		return e, 0, fmt.Errorf("entry %q link field: %w", e.Path, ErrInvalid)
	}
	if e.Link, err = strconv.Unquote(q); err != nil {
		return e, 0, fmt.Errorf("entry %q link field: %w", e.Path, ErrInvalid)
	}
	if !ValidPath(e.Path) {
		return e, 0, fmt.Errorf("entry path %q is not a clean relative path: %w", e.Path, ErrInvalid)
	}
	if len(e.Link) > MaxPath || strings.IndexByte(e.Link, 0) >= 0 || (e.Type == TypeSymlink && e.Link == "") {
		return e, 0, fmt.Errorf("entry %q link target: %w", e.Path, ErrInvalid)
	}
	if e.Type != TypeSymlink && e.Link != "" {
		return e, 0, fmt.Errorf("entry %q: only a symlink has a target: %w", e.Path, ErrInvalid)
	}
	if e.Type != TypeFile && flag == FlagContent {
		return e, 0, fmt.Errorf("entry %q: only a file has content: %w", e.Path, ErrInvalid)
	}
	return e, flag, nil
}

// Limits bound what a Reader accepts.
type Limits struct {
	MaxEntries int   // entry and removal records
	MaxFile    int64 // content of one file
	MaxTotal   int64 // content of every file together
	MaxLine    int   // one record line but S
	MaxState   int   // the S (sessions) line
}

// DefaultLimits are the host's bounds of one stream.
var DefaultLimits = Limits{MaxEntries: 2_000_000, MaxFile: 64 << 30, MaxTotal: 256 << 30, MaxLine: 3*MaxPath + 256, MaxState: 16 << 20}

// Record kinds.
const (
	KindEntry   = 'E' // Entry, Flag; Content when Flag is FlagContent
	KindRemoved = 'D' // Entry.Path removed since the base
	KindState   = 'S' // JSON: the sessions
	KindHeader  = 'H' // JSON: a restore's header
	KindEnd     = 'Z' // JSON: the trailer; nothing follows
)

// Record is one record of a stream.
type Record struct {
	Kind  byte
	Entry Entry
	Flag  byte
	JSON  []byte
}

// Reader reads a stream, refusing anything past its Limits.
type Reader struct {
	br      *bufio.Reader
	lim     Limits
	entries int
	total   int64
	left    int64 // content of the last record not read yet
	ended   bool
}

// NewReader reads r with limits lim.
func NewReader(r io.Reader, lim Limits) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 256<<10), lim: lim}
}

// Next returns the next record; content of the previous one that was not
// read is skipped. After a KindEnd record it returns io.EOF; a stream that
// ends without one is an error wrapping io.ErrUnexpectedEOF.
func (r *Reader) Next() (Record, error) {
	if r.ended {
		return Record{}, io.EOF
	}
	if r.left > 0 {
		if _, err := io.CopyN(io.Discard, r.br, r.left); err != nil {
			return Record{}, fmt.Errorf("checkpoint stream cut in a file's content: %w", io.ErrUnexpectedEOF)
		}
		r.left = 0
	}
	line, err := r.line(r.lim.MaxState)
	if err != nil {
		return Record{}, err
	}
	if len(line) < 2 || line[1] != ' ' {
		return Record{}, fmt.Errorf("record %.20q: %w", line, ErrInvalid)
	}
	rec := Record{Kind: line[0]}
	body := line[2:]
	if rec.Kind != KindState && len(line) > r.lim.MaxLine {
		return Record{}, fmt.Errorf("a %c record of %d bytes is over the bound of %d: %w", rec.Kind, len(line), r.lim.MaxLine, ErrInvalid)
	}
	switch rec.Kind {
	case KindEntry:
		if r.entries++; r.entries > r.lim.MaxEntries {
			return Record{}, fmt.Errorf("more than %d entries: %w", r.lim.MaxEntries, ErrInvalid)
		}
		rec.Entry, rec.Flag, err = parseEntry(body)
		if err != nil {
			return Record{}, err
		}
		if rec.Flag == FlagContent {
			if rec.Entry.Size > r.lim.MaxFile {
				return Record{}, fmt.Errorf("file %q of %d bytes is over the bound of %d: %w", rec.Entry.Path, rec.Entry.Size, r.lim.MaxFile, ErrInvalid)
			}
			if r.total += rec.Entry.Size; r.total > r.lim.MaxTotal {
				return Record{}, fmt.Errorf("content over the bound of %d bytes: %w", r.lim.MaxTotal, ErrInvalid)
			}
			r.left = rec.Entry.Size
		}
	case KindRemoved:
		if r.entries++; r.entries > r.lim.MaxEntries {
			return Record{}, fmt.Errorf("more than %d entries: %w", r.lim.MaxEntries, ErrInvalid)
		}
		p, err := strconv.Unquote(body)
		if err != nil || !ValidPath(p) {
			return Record{}, fmt.Errorf("removed path %.80q: %w", body, ErrInvalid)
		}
		rec.Entry.Path = p
	case KindState, KindHeader, KindEnd:
		rec.JSON = []byte(body)
		if rec.Kind == KindEnd {
			r.ended = true
		}
	default:
		return Record{}, fmt.Errorf("record kind %q: %w", rec.Kind, ErrInvalid)
	}
	return rec, nil
}

// Content reads the content of the last entry record (exactly its Size
// bytes, then io.EOF).
func (r *Reader) Content() io.Reader { return &contentReader{r} }

type contentReader struct{ r *Reader }

func (c *contentReader) Read(p []byte) (int, error) {
	if c.r.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > c.r.left {
		p = p[:c.r.left]
	}
	n, err := c.r.br.Read(p)
	c.r.left -= int64(n)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// line reads one line of at most max bytes, without its newline.
func (r *Reader) line(max int) (string, error) {
	var buf []byte
	for {
		frag, err := r.br.ReadSlice('\n')
		if len(buf)+len(frag) > max+1 {
			return "", fmt.Errorf("a record line is over %d bytes: %w", max, ErrInvalid)
		}
		buf = append(buf, frag...)
		if err == nil {
			return string(buf[:len(buf)-1]), nil
		}
		if err != bufio.ErrBufferFull {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return "", fmt.Errorf("checkpoint stream cut: %w", err)
		}
	}
}

// AppendRemoved appends a removal record.
func AppendRemoved(b []byte, p string) []byte {
	b = append(b, 'D', ' ')
	b = strconv.AppendQuote(b, p)
	return append(b, '\n')
}

// AppendJSON appends a record of kind k holding one line of JSON.
func AppendJSON(b []byte, k byte, js []byte) []byte {
	b = append(b, k, ' ')
	b = append(b, js...)
	return append(b, '\n')
}
