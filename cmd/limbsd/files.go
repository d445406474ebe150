package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"

	"github.com/limbs-dev/limbs/internal/files"
	"github.com/limbs-dev/limbs/internal/shell"
)

// filesAPI serves the file API in limbsd itself when the agent is limbsd's
// own user, and otherwise in a worker process with the agent's identity
// (see files.Worker): every path the API opens is then resolved with the
// agent's permissions, and what it writes is the agent's.
func filesAPI(cfg config, agent *shell.Identity, log *slog.Logger) (http.Handler, error) {
	if agent == nil {
		return files.New(files.Options{Workdir: cfg.workdir, StateDir: cfg.stateDir, Logger: log})
	}
	// The worker's undo history and archive spool: the agent's directory
	// in limbsd's state (mode 0711, see shell.Identity).
	dir := filepath.Join(cfg.stateDir, "files")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.Lchown(dir, agent.UID, agent.GID); err != nil {
		return nil, fmt.Errorf("giving %s to uid %d: %w", dir, agent.UID, err)
	}
	exe, err := os.Executable()
	if err != nil {
		exe = "/proc/self/exe"
	}
	env := append(os.Environ(), "HOME="+agent.Home)
	w := files.NewWorker(files.WorkerOptions{
		Path:       exe,
		Args:       []string{"--workdir", cfg.workdir, "--state-dir", dir, "--log-level", cfg.logLevel},
		Env:        env,
		Credential: agent.Credential(),
		Logger:     log,
	})
	return w, nil
}

// runFilesWorker is the worker process's main.
func runFilesWorker(args []string) int {
	fs := flag.NewFlagSet("limbsd files worker", flag.ContinueOnError)
	workdir := fs.String("workdir", "/workspace", "")
	stateDir := fs.String("state-dir", "", "")
	logLevel := fs.String("log-level", "info", "")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(*logLevel))
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("worker", "files")
	if err := files.ServeWorker(files.Options{Workdir: *workdir, StateDir: *stateDir, Logger: log}); err != nil {
		log.Error("files worker stopped", "err", err)
		return exitError
	}
	return exitOK
}
