// Package tool defines the agent-facing tools of limbs once: each tool's
// name, description, JSON input schema and a typed handler, so that the MCP
// server and the model-specific profiles serve the same behaviour under the
// names and shapes models were trained on.
//
// This file set holds the file-editing tools: str_replace_based_edit_tool
// (Anthropic's text editor, plus undo_edit) and apply_patch (the Codex patch
// format). They work over Files, a small interface that the limbs Files API
// client satisfies (client.FileStore), so they run host-side and every write
// carries the If-Match of what was read.
//
// The shell tools (shell.go: shell_run, shell_input, shell_wait,
// shell_read, shell_screen and session) work over Sessions, which
// *client.Client satisfies. A Shell is the state of one agent (one MCP
// connection): its default session, created on first use, and the ids of
// the commands it ran. Each result is the output as limbsd cleans it, then
// one fact block in brackets (exit code and signal, cwd, duration; or still
// running, waiting for input, a pager or full-screen program and the input
// that leaves it; exact byte ranges of a truncated output and the
// shell_read call that returns the rest). Truncated output is rebuilt by
// the tool from the raw stream (head and tail, cut at line boundaries), so
// limbsd's own note, which names its HTTP route, never reaches the model.
//
// Yield policy: without a `yield`, shell_run waits DefaultYield(command)
// seconds before answering "still running". Each simple command of the
// text (split at newlines, ;, &&, ||, |, & and parentheses) is classified
// by its first word(s), after assignments and wrappers (sudo, env, time,
// nohup, nice, exec, command, timeout N); the slowest class wins:
//
//	quick    10 s   ls cat head tail grep rg find wc sed awk diff stat ps df du
//	                echo pwd cd mkdir rm cp mv ...; git status/log/diff/show/
//	                branch/..., go version/env/fmt, docker ps/images/logs, ...
//	build    30 s   make, go build/test, cargo build/test, npm test, pytest, ...
//	                and every program not listed (limbsd's own default)
//	install 120 s   apt apt-get dnf yum apk brew conda curl wget rsync scp
//	                rustup; git clone/fetch/pull, pip install, uv, poetry
//	                install, npm install/ci, yarn, pnpm install, cargo install,
//	                go get/install/mod, gem/bundle install, docker pull/build
//
// shell_input and shell_wait continue a command with its class's yield (10 s
// when no command of the Shell runs).
//
// Results are text for the model plus the same facts as a struct. The text
// never names HTTP routes, CLI commands or flags: it speaks of the tools
// themselves. The package must never trust what the sandbox wrote (file
// content is data, never instructions or paths to follow) and must never
// write a file it did not read first without saying so.
package tool

import (
	"context"
	"encoding/json"
	"io/fs"
	"path"
	"strings"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Files is what the editing tools need of a sandbox's file system. Paths
// are absolute (the tools resolve relative ones from their cwd first).
//
// An etag is the hex sha256 of a file's content, the value the limbs Files
// API takes as if_match. Errors wrap the wire sentinels: wire.ErrNotFound
// when nothing is at the path, wire.ErrConflict when ifMatch is set and the
// file no longer has it (or is gone), wire.ErrBadRequest for a directory
// where a file was wanted, wire.ErrTooLarge for a file too big to edit.
type Files interface {
	// ReadFile returns the whole content of the regular file at p and its etag.
	ReadFile(ctx context.Context, p string) (data []byte, etag string, err error)
	// WriteFile replaces (or creates, with its parents) the file at p
	// atomically. mode 0 keeps the mode of the file it replaces (0644 for a
	// new one). A non-empty ifMatch is the etag the file must still have.
	// It returns the etag of what was written.
	WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode, ifMatch string) (etag string, err error)
	// DeleteFile removes the file or symlink at p (never a directory's content).
	DeleteFile(ctx context.Context, p string) error
	// Stat describes what is at p without following it further than the
	// caller named: Type is file, dir, symlink, fifo, socket or device.
	Stat(ctx context.Context, p string) (wire.FileEntry, error)
	// List returns what is under the directory dir, depth levels deep,
	// sorted by path, hidden entries included.
	List(ctx context.Context, dir string, depth int) ([]wire.FileEntry, error)
}

// Tool is one agent-facing tool: what a model is shown (Name, Description,
// InputSchema) and what runs when it calls it.
type Tool[In, Out any] struct {
	Name        string
	Description string
	// InputSchema is the JSON Schema of In, as served to the model.
	InputSchema json.RawMessage
	// Handle runs one call. cwd resolves relative paths (the session's
	// working directory). A refusal the model can act on (no match, bad
	// line number, a file that changed) is a Result with IsError set and a
	// nil error; the error is for calls that could not be carried out at
	// all (the sandbox unreachable, a context cancelled).
	Handle func(ctx context.Context, f Files, cwd string, in In) (Result[Out], error)
}

// Result is what one call returns: Text for the model, Out the same facts
// for programs (MCP structuredContent).
type Result[Out any] struct {
	Text    string
	Out     Out
	IsError bool
}

// refusal is a Result that tells the model what went wrong and what to do.
func refusal[Out any](text string) Result[Out] {
	return Result[Out]{Text: text, IsError: true}
}

// resolve makes p absolute against cwd (itself absolute, or / when empty)
// and cleans it. It never looks at the file system.
func resolve(cwd, p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	if cwd == "" || !path.IsAbs(cwd) {
		cwd = "/" + strings.TrimPrefix(cwd, "/")
	}
	return path.Join(cwd, p)
}

// detail is the part of an error from Files that is fit for a model: the
// daemon's words before any hint that names its HTTP API (which follows a
// "; "), without the sentinel's suffix.
func detail(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "; "); i >= 0 {
		msg = msg[:i]
	}
	for _, s := range []error{wire.ErrBadRequest, wire.ErrNotFound, wire.ErrConflict, wire.ErrTooLarge} {
		msg = strings.TrimSuffix(msg, ": "+s.Error())
	}
	return msg
}
