// Package files serves the Files part of the limbs API from inside a sandbox:
// read, write, delete, list, archives, watch and the str_replace_editor-style
// edit endpoint, so that no file content ever has to pass through a shell.
//
// It must never follow a symlink out of a path the caller named, nor write
// anywhere but where it was asked, nor hold a whole large file in memory:
// content is streamed, and only the editor (which refuses files over
// MaxEditSize) reads a file whole.
package files

import (
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Options configure a Server.
type Options struct {
	// Workdir is where relative paths are resolved.
	Workdir string
	// StateDir keeps the editor's undo history (StateDir/edits) and spools
	// uploaded archives while they are checked (StateDir/tmp).
	StateDir string
	Logger   *slog.Logger
}

// Server serves /v1/files and everything under it. Authentication is the
// caller's job.
type Server struct {
	opts    Options
	log     *slog.Logger
	history *history
	// locks serialise the check-then-commit of writes and edits on one path,
	// so an if_match precondition cannot be overtaken by another API write.
	// Striped rather than per-path so that nothing ever needs freeing.
	locks [64]sync.Mutex
}

// New returns a Server. Workdir must be set; StateDir defaults to a
// directory under os.TempDir (undo history then does not survive a reboot).
func New(opts Options) (*Server, error) {
	if opts.Workdir == "" {
		return nil, fmt.Errorf("files: Options.Workdir is empty; pass the daemon's --workdir: %w", wire.ErrBadRequest)
	}
	wd, err := filepath.Abs(opts.Workdir)
	if err != nil {
		return nil, fmt.Errorf("files: workdir %q: %w", opts.Workdir, err)
	}
	opts.Workdir = wd
	if opts.StateDir == "" {
		opts.StateDir = filepath.Join(os.TempDir(), "limbs-files")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	h, err := newHistory(filepath.Join(opts.StateDir, "edits"))
	if err != nil {
		return nil, err
	}
	return &Server{opts: opts, log: opts.Logger, history: h}, nil
}

// ServeHTTP serves the Files routes. It accepts both the daemon's own paths
// (/v1/files, /v1/files/list, ...) and paths that still carry a prefix in
// front of them (a control plane forwarding /v1/sandboxes/ID/files/...).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	route := r.URL.Path
	if i := strings.LastIndex(route, "/files"); i >= 0 {
		route = route[i+len("/files"):]
	}
	route = strings.TrimSuffix(route, "/")
	var err error
	switch route {
	case "":
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			err = s.serveRead(w, r)
		case http.MethodPut:
			err = s.serveWrite(w, r)
		case http.MethodDelete:
			err = s.serveDelete(w, r)
		default:
			err = methodErr(r, "GET, PUT or DELETE")
		}
	case "/list":
		err = onlyMethod(r, http.MethodGet)
		if err == nil {
			err = s.serveList(w, r)
		}
	case "/archive":
		switch r.Method {
		case http.MethodGet:
			err = s.serveGetArchive(w, r)
		case http.MethodPut:
			err = s.servePutArchive(w, r)
		default:
			err = methodErr(r, "GET or PUT")
		}
	case "/edit":
		err = onlyMethod(r, http.MethodPost)
		if err == nil {
			err = s.serveEdit(w, r)
		}
	case "/watch":
		err = onlyMethod(r, http.MethodGet)
		if err == nil {
			err = s.serveWatch(w, r)
		}
	default:
		err = fmt.Errorf("no files route %q; the routes are /v1/files, /v1/files/list, /v1/files/archive, /v1/files/edit and /v1/files/watch: %w", r.URL.Path, wire.ErrNotFound)
	}
	if err != nil {
		if errors.Is(err, errResponded) {
			return
		}
		if status, _ := wire.StatusOf(err); status >= 500 {
			s.log.Error("files request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		}
		wire.WriteError(w, err)
	}
}

// errResponded tells ServeHTTP that the handler already wrote a response
// (a stream that failed half way) and nothing more may be written.
var errResponded = errors.New("response already started")

func onlyMethod(r *http.Request, m string) error {
	if r.Method == m {
		return nil
	}
	return methodErr(r, m)
}

func methodErr(r *http.Request, allowed string) error {
	return fmt.Errorf("method %s is not served on %s; use %s: %w", r.Method, r.URL.Path, allowed, wire.ErrBadRequest)
}

// resolve turns the caller's path into a clean absolute one. It does not
// resolve symlinks: what the caller named is what is reported.
func (s *Server) resolve(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("query parameter path is required (absolute, or relative to %s): %w", s.opts.Workdir, wire.ErrBadRequest)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("path %q contains a NUL byte: %w", p, wire.ErrBadRequest)
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(s.opts.Workdir, p)
	}
	return filepath.Clean(p), nil
}

func (s *Server) queryPath(r *http.Request) (string, error) {
	return s.resolve(r.URL.Query().Get("path"))
}

// lock serialises commits to one path (see Server.locks).
func (s *Server) lock(path string) func() {
	h := fnv.New32a()
	_, _ = h.Write([]byte(path))
	m := &s.locks[h.Sum32()%uint32(len(s.locks))]
	m.Lock()
	return m.Unlock
}

// statErr turns an os error about path into a wire error a caller can act on.
func statErr(path string, err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s does not exist: %w", path, wire.ErrNotFound)
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("%s: permission denied: %w", path, wire.ErrBadRequest)
	case isNotDir(err):
		return fmt.Errorf("%s: a parent of it is not a directory: %w", path, wire.ErrBadRequest)
	default:
		return fmt.Errorf("%s: %w", path, err)
	}
}
