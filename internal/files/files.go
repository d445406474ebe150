// Package files serves the Files part of the limbs API from inside a sandbox:
// read, write, delete, list, archives, watch and the str_replace_editor-style
// edit endpoint, so that no file content ever has to pass through a shell.
//
// It must never follow a symlink out of a path the caller named, nor write
// anywhere but where it was asked.
package files

import (
	"log/slog"
	"net/http"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Options configure a Server.
type Options struct {
	// Workdir is where relative paths are resolved.
	Workdir string
	// StateDir keeps the editor's undo history (StateDir/edits).
	StateDir string
	Logger   *slog.Logger
}

// Server serves /v1/files and everything under it. Authentication is the
// caller's job.
type Server struct {
	opts Options
}

// New returns a Server.
func New(opts Options) (*Server, error) {
	return &Server{opts: opts}, nil
}

// ServeHTTP serves the Files routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	wire.WriteError(w, wire.ErrUnavailable)
}
