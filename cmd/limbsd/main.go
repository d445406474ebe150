// Command limbsd is the in-sandbox daemon of limbs: it owns the shell
// sessions and the file API of one sandbox and serves them over HTTP on a
// Unix socket (docs/api.md).
//
// When it runs as PID 1 (a container started without --init) it re-executes
// itself as a child and stays behind as a minimal init that forwards
// signals and reaps orphaned zombies (see init.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/limbs-dev/limbs/internal/checkpoint"
	"github.com/limbs-dev/limbs/internal/endpoint"
	"github.com/limbs-dev/limbs/internal/files"
	"github.com/limbs-dev/limbs/internal/journal"
	"github.com/limbs-dev/limbs/internal/runtime"
	"github.com/limbs-dev/limbs/internal/shell"
	"github.com/limbs-dev/limbs/internal/wire"
)

const defaultListen = "unix:///run/limbs/limbsd.sock"

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

type config struct {
	listen      string
	allowRemote bool
	token       string
	workdir     string
	stateDir    string
	shell       string
	logLevel    string
	// Bounds of the output kept on disk (shell.ParseSize; < 0: none).
	maxSessionDisk int64
	maxDisk        int64
	user           string
	// Bounds of the event journal's files (docs/api.md, "Events").
	journalMaxDisk   int64
	journalMaxOutput int64
	journalMemory    int
}

func main() {
	if os.Getenv(files.WorkerEnv) != "" {
		// The worker runs as the agent: not dumpable, so that the agent
		// cannot trace it nor take its descriptors (limbsd passes every
		// file API connection over descriptor 3, and its standard error
		// is limbsd's log), only kill it.
		_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
		os.Exit(runFilesWorker(os.Args[1:]))
	}
	if os.Getpid() == 1 && os.Getenv(childEnv) == "" {
		os.Exit(runInit())
	}
	// Every shell inherits this environment: the marker means nothing to it.
	os.Unsetenv(childEnv)
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("limbsd", flag.ContinueOnError)
	var cfg config
	var version bool
	fs.StringVar(&cfg.listen, "listen", defaultListen, "where to serve: unix:///path/to.sock or HOST:PORT (loopback only unless --allow-remote)")
	fs.BoolVar(&cfg.allowRemote, "allow-remote", false, "allow --listen on a non-loopback TCP address")
	fs.StringVar(&cfg.token, "token", "", "bearer token clients must send (default $LIMBS_TOKEN, else generated and written to limbsd.token next to the socket)")
	fs.StringVar(&cfg.workdir, "workdir", "/workspace", "default working directory of new sessions (created if missing)")
	fs.StringVar(&cfg.stateDir, "state-dir", defaultStateDir(), "per-session state and full output logs")
	fs.StringVar(&cfg.shell, "shell", "", "shell of new sessions (default bash when found, else sh)")
	fs.StringVar(&cfg.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&cfg.user, "user", "", "run every shell and the file API as this user (uid[:gid] or a name); limbsd keeps its own identity, which must be root for a different user")
	fs.BoolVar(&version, "version", false, "print the version and exit")
	maxSessionDisk := fs.String("max-session-disk", "256MiB", "most output one session keeps in --state-dir (its stream and command logs; 0: no bound)")
	maxDisk := fs.String("max-disk", "1GiB", "most output all sessions together keep in --state-dir (0: no bound)")
	journalMaxDisk := fs.String("journal-max-disk", "32MiB", "most the event journal keeps in --state-dir/journal, the output bytes apart (the oldest events are dropped)")
	fs.IntVar(&cfg.journalMemory, "journal-memory", journal.DefaultRingEvents, "events the journal keeps in memory; readers further behind are served from its files")
	journalMaxOutput := fs.String("journal-max-output-disk", "128MiB", "most output bytes the event journal keeps for GET /v1/events?output=bytes (the oldest are dropped)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "limbsd: unexpected arguments %q; run 'limbsd -h' for the flags\n", fs.Args())
		return exitUsage
	}
	if version {
		fmt.Println("limbsd", wire.Version)
		return exitOK
	}
	for _, f := range []struct {
		name string
		v    string
		to   *int64
	}{{"max-session-disk", *maxSessionDisk, &cfg.maxSessionDisk}, {"max-disk", *maxDisk, &cfg.maxDisk},
		{"journal-max-disk", *journalMaxDisk, &cfg.journalMaxDisk}, {"journal-max-output-disk", *journalMaxOutput, &cfg.journalMaxOutput}} {
		n, err := shell.ParseSize(f.v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "limbsd: --%s: %v\n", f.name, err)
			return exitUsage
		}
		*f.to = n
	}
	// One scheduler thread unless the operator sets GOMAXPROCS: limbsd
	// waits on terminals and sockets and does little work per event, and
	// with more threads each hand-off between goroutines wakes another
	// (often idle) CPU, the largest share of a command's round trip on a
	// small machine.
	if os.Getenv("GOMAXPROCS") == "" {
		goruntime.GOMAXPROCS(1)
	}
	reserveThreads(spareThreads)
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "limbsd: --log-level %q: use debug, info, warn or error\n", cfg.logLevel)
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if cfg.token == "" {
		cfg.token = os.Getenv("LIMBS_TOKEN")
	}
	// The shells inherit the daemon's environment; the commands an agent
	// runs have no business holding the key to the daemon.
	os.Unsetenv("LIMBS_TOKEN")
	agent, err := agentIdentity(cfg.user)
	if errors.Is(err, errRootAgentReexec) {
		env := os.Environ()
		if cfg.token != "" {
			env = append(env, "LIMBS_TOKEN="+cfg.token)
		}
		err = reexecWithoutCaps(agent, env)
	}
	if err != nil {
		// Exit code 2: what limbsd was asked is wrong, retrying cannot help.
		log.Error("limbsd cannot start", "err", err)
		return exitUsage
	}
	if err := serve(cfg, agent, log); err != nil {
		log.Error("limbsd stopped", "err", err)
		return exitError
	}
	return exitOK
}

// defaultStateDir follows the file-system conventions: system state for
// root, the XDG state directory for anyone else.
func defaultStateDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/limbs"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "limbs")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "limbs")
	}
	return filepath.Join(os.TempDir(), "limbs-state")
}

func serve(cfg config, agent *shell.Identity, log *slog.Logger) error {
	ln, tokenDir, err := listen(cfg)
	if err != nil {
		return err
	}
	defer ln.Close()
	if cfg.token == "" {
		if cfg.token, err = endpoint.WriteTokenFile(filepath.Join(tokenDir, "limbsd.token")); err != nil {
			return err
		}
		log.Info("generated a token", "file", filepath.Join(tokenDir, "limbsd.token"))
	}
	if err := os.MkdirAll(cfg.workdir, 0o755); err != nil {
		return fmt.Errorf("creating --workdir: %w; pass a writable --workdir", err)
	}
	if err := os.MkdirAll(cfg.stateDir, 0o700); err != nil {
		return fmt.Errorf("creating --state-dir: %w; pass a writable --state-dir", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// The journal opens first: it ends what a previous limbsd left
	// running before the restored sessions record their new shells, and
	// closes last, after the shells' ends.
	jrn, err := journal.Open(journal.Options{Dir: filepath.Join(cfg.stateDir, "journal"), MaxDisk: cfg.journalMaxDisk, MaxOutputDisk: cfg.journalMaxOutput, RingEvents: cfg.journalMemory, Logger: log})
	if err != nil {
		return fmt.Errorf("opening the event journal: %w", err)
	}
	defer jrn.Close()
	mgr, err := shell.NewManager(ctx, shell.Options{
		StateDir: cfg.stateDir,
		Workdir:  cfg.workdir,
		Shell:    cfg.shell,
		Agent:    agent,
		Logger:   log,

		MaxSessionDisk: cfg.maxSessionDisk,
		MaxDisk:        cfg.maxDisk,
		Journal:        jrn,
	})
	if err != nil {
		return fmt.Errorf("starting the session manager: %w", err)
	}
	defer mgr.Close()
	fsrv, err := filesAPI(cfg, agent, log)
	if err != nil {
		return fmt.Errorf("starting the file API: %w", err)
	}
	if c, ok := fsrv.(interface{ Close() error }); ok {
		defer c.Close()
	}
	// The workspace watcher; rewatch starts it again, on a workspace
	// mounted anew (a fork's copy-on-write one, mounted over the pool
	// sandbox's after limbsd started).
	var watchMu sync.Mutex
	stopWatch, watchDone := func() {}, make(chan struct{})
	close(watchDone)
	rewatch := func() {
		watchMu.Lock()
		defer watchMu.Unlock()
		stopWatch()
		<-watchDone
		wctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		stopWatch, watchDone = stop, done
		go func() {
			defer close(done)
			running := func() []journal.Running {
				var out []journal.Running
				for _, r := range mgr.Running() {
					out = append(out, journal.Running{Session: r.Session, Command: r.Command})
				}
				return out
			}
			root, _ := filepath.Abs(cfg.workdir)
			state, _ := filepath.Abs(cfg.stateDir)
			if err := jrn.Watch(wctx, journal.WatchOptions{Root: root, Skip: []string{state}, Running: running}); err != nil {
				log.Warn("the workspace watcher cannot start: the journal records no file.changed events", "err", err)
			}
		}()
	}
	rewatch()
	defer func() {
		watchMu.Lock()
		stopWatch()
		watchMu.Unlock()
	}()
	ckpt := checkpoint.NewDaemon(checkpoint.Options{Workdir: cfg.workdir, Skip: []string{cfg.stateDir}, Sessions: mgr, Remounted: rewatch, Logger: log})
	api := runtime.New(runtime.Options{Token: cfg.token, Manager: mgr, Files: fsrv, Journal: jrn, Checkpoint: ckpt, Logger: log})
	srv := &http.Server{
		Handler:           api,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("limbsd serving", "listen", cfg.listen, "version", wire.Version, "workdir", cfg.workdir, "state_dir", cfg.stateDir)

	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	// Blocking execs only end when their command does: give requests a
	// moment, then cut them; closing the manager ends the commands.
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	return nil
}

// listen opens cfg.listen and says where a generated token belongs.
func listen(cfg config) (net.Listener, string, error) {
	// Group access lets a host user in the socket's group reach a daemon
	// running as root without opening it to everyone; with --user the
	// agent's groups may include limbsd's: owner only.
	o := endpoint.ListenOptions{SocketMode: 0o660, AllowRemote: cfg.allowRemote, Example: defaultListen, Name: "daemon"}
	if cfg.user != "" {
		o.SocketMode = 0o600
	}
	ln, err := endpoint.Listen(cfg.listen, o)
	if err != nil {
		return nil, "", err
	}
	path, ok := strings.CutPrefix(cfg.listen, "unix://")
	if !ok {
		return ln, cfg.stateDir, nil
	}
	dir := filepath.Dir(path)
	if cfg.user != "" {
		// Root's socket is for whoever made the directory it is in: the
		// host's control plane, which may not be root.
		if err := giveToDirOwner(path, dir); err != nil {
			ln.Close()
			return nil, "", err
		}
	}
	return ln, dir, nil
}

// giveToDirOwner gives path to the owner of dir when they differ.
func giveToDirOwner(path, dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) == os.Geteuid() {
		return nil
	}
	if err := os.Lchown(path, int(st.Uid), int(st.Gid)); err != nil {
		return fmt.Errorf("giving the socket to %s's owner (uid %d): %w", dir, st.Uid, err)
	}
	return nil
}

// spareThreads is how many OS threads limbsd makes at start. It shares
// the sandbox's pids limit with the agent, and the Go runtime ends the
// whole process when it cannot make a thread it needs: a fork bomb at the
// limit took limbsd down while it restarted the bomb's session. Threads
// made now stay, idle, for the runtime to reuse.
const spareThreads = 16

// reserveThreads makes n OS threads: each goroutine locked to its thread
// holds one until all n exist; unlocked before they return, the threads
// go to the runtime's idle list instead of exiting.
func reserveThreads(n int) {
	var made, done sync.WaitGroup
	made.Add(n)
	done.Add(n)
	release := make(chan struct{})
	for range n {
		go func() {
			defer done.Done()
			goruntime.LockOSThread()
			made.Done()
			<-release
			goruntime.UnlockOSThread()
		}()
	}
	made.Wait()
	close(release)
	done.Wait()
}
