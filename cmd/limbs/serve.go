package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/limbs-dev/limbs/internal/control"
	"github.com/limbs-dev/limbs/internal/dashboard"
	"github.com/limbs-dev/limbs/internal/endpoint"
	"github.com/limbs-dev/limbs/internal/eventlog"
	"github.com/limbs-dev/limbs/internal/provider/docker"
	"github.com/limbs-dev/limbs/internal/provider/local"
	"github.com/limbs-dev/limbs/internal/secret"
	"github.com/limbs-dev/limbs/internal/shell"
	"github.com/limbs-dev/limbs/internal/sysmon"
)

// localImage is the image name of local sandboxes: they see the host's
// file system.
const localImage = "host"

func init() {
	commands["serve"] = command{summary: "run the control plane: many sandboxes behind one API", run: runServe}
}

// poolFlag collects repeated --pool image=N.
type poolFlag map[string]int

func (p poolFlag) String() string {
	keys := make([]string, 0, len(p))
	for k, n := range p {
		keys = append(keys, k+"="+strconv.Itoa(n))
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func (p poolFlag) Set(v string) error {
	i := strings.LastIndexByte(v, '=')
	if i <= 0 {
		return fmt.Errorf("%q: want IMAGE=N, e.g. --pool limbs/base:latest=2", v)
	}
	n, err := strconv.Atoi(v[i+1:])
	if err != nil || n < 0 || n > 100 {
		return fmt.Errorf("%q: N must be a number from 0 to 100", v)
	}
	p[v[:i]] = n
	return nil
}

func runServe(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("limbs serve", flag.ContinueOnError)
	listen := fs.String("listen", defaultControlAddr, "where to serve: HOST:PORT (loopback unless --allow-remote) or unix:///path/to.sock")
	allowRemote := fs.Bool("allow-remote", false, "allow --listen on a non-loopback address")
	token := fs.String("token", "", "bearer token clients must send (env LIMBS_TOKEN; default: the state dir's token file, generated on first run)")
	stateDir := fs.String("state-dir", defaultServeStateDir(), "registry, sandbox sockets and local workspaces")
	providerName := fs.String("provider", "", "default provider: docker or local (default: docker when an engine answers, else local)")
	pool := poolFlag{}
	fs.Var(pool, "pool", "keep N sandboxes of IMAGE ready (IMAGE=N, repeatable); creates with that image and default settings take one at once")
	limbsdPath := fs.String("limbsd", "", "static limbsd binary to run in sandboxes (default: limbsd next to this executable, else on PATH)")
	isolation := fs.String("isolation", local.IsolateAuto, "local provider: auto (bubblewrap when it works), bwrap (required) or none")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	metricsPublic := fs.Bool("metrics-public", false, "serve /metrics (Prometheus) without the token; by default a scrape sends it as a bearer token like any client")
	var roots rootsFlag
	fs.Var(&roots, "workspace-root", "host directory inside which host workspaces must be (repeatable; default: any directory but system paths and the state dir)")
	maxSandboxes := fs.Int("max-sandboxes", 256, "most sandboxes clients may hold (warm pool ones not counted until claimed); 0: no cap")
	maxConns := fs.Int("max-conns", 1024, "most open client connections (WebSockets included); more are answered 503 and closed; 0: no cap")
	headerTimeout := fs.Duration("header-timeout", 10*time.Second, "time a client has to send a request's headers")
	idleTimeout := fs.Duration("idle-timeout", 2*time.Minute, "time a kept-alive connection may stay idle between requests")
	bodyTimeout := fs.Duration("body-timeout", control.DefaultBodyTimeout, "time a request body may take to arrive (file and archive uploads excepted)")
	maxDisk := fs.String("sandbox-max-disk", "", "most command output each sandbox keeps on disk, such as 1GiB (limbsd --max-disk; default: limbsd's, 1GiB); a create's max_disk_mb wins")
	mcpFlags := addMCPServeFlags(fs)
	evMaxSize := fs.String("events-max-size", "1GiB", "most each sandbox's event log keeps on disk (its oldest events go first); 0: no bound")
	evMaxAge := fs.Duration("events-max-age", eventlog.DefaultMaxAge, "oldest events each sandbox's event log keeps; 0: no bound")
	evKeepDeleted := fs.Duration("events-keep-deleted", eventlog.DefaultKeepDeleted, "how long a deleted sandbox's event log stays readable (limbs events)")
	checkpointTTLFlag := fs.Duration("checkpoint-ttl", control.DefaultCheckpointTTL, "how long a checkpoint is kept when its create names no ttl (its sandbox deleted or not); 0: until deleted (docs/checkpoints.md)")
	forkCopy := fs.Bool("fork-copy", false, "give every fork a full copy of its checkpoint instead of a copy-on-write view of one shared copy (the default when serve runs as root with the docker provider; docs/checkpoints.md)")
	evFollow := fs.Bool("events-follow", true, "follow each running sandbox's limbsd journal into the event log (commands, output, input, files); false keeps only limbs serve's own events")
	maxSessionDisk := fs.String("sandbox-max-session-disk", "", "most command output each session of a sandbox keeps on disk, such as 256MiB (limbsd --max-session-disk; default: limbsd's, 256MiB); a create's max_session_disk_mb wins")
	procs := fs.Int("procs", 0, "most threads running limbs serve's Go code at once (GOMAXPROCS); 0: a quarter of the CPUs, at least 1, unless the GOMAXPROCS environment variable is set")
	if code, ok := parseFlagsOnly(fs, args, "serve"); !ok {
		return code
	}
	if *procs < 0 {
		fmt.Fprintln(os.Stderr, "limbs serve: --procs must be 0 (a quarter of the CPUs) or more")
		return 2
	}
	if n := serveProcs(*procs, os.Getenv("GOMAXPROCS") != "", runtime.GOMAXPROCS(0)); n > 0 {
		runtime.GOMAXPROCS(n)
	}
	var diskMB [2]int64
	for i, f := range []struct{ name, v string }{{"sandbox-max-disk", *maxDisk}, {"sandbox-max-session-disk", *maxSessionDisk}} {
		if f.v == "" {
			continue
		}
		n, err := shell.ParseSize(f.v)
		if err == nil && n < 0 {
			err = fmt.Errorf("size %q: give a size such as 256MiB; every sandbox is bounded", f.v)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "limbs serve: --%s: %v\n", f.name, err)
			return 2
		}
		diskMB[i] = (n + 1<<20 - 1) >> 20
	}
	evSize, err := shell.ParseSize(*evMaxSize)
	if err != nil || evSize < 0 {
		fmt.Fprintf(os.Stderr, "limbs serve: --events-max-size %q: give a size such as 1GiB, or 0 for no bound\n", *evMaxSize)
		return 2
	}
	if evSize == 0 {
		evSize = -1
	}
	if *evMaxAge < 0 || *evKeepDeleted <= 0 {
		fmt.Fprintln(os.Stderr, "limbs serve: --events-max-age must be 0 (no bound) or more, --events-keep-deleted more than 0")
		return 2
	}
	ageBound := *evMaxAge
	if ageBound == 0 {
		ageBound = -1
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "limbs serve: --log-level %q: use debug, info, warn or error\n", *logLevel)
		return 2
	}
	// Every log line is masked: the sandboxes' secret values never reach
	// the log (docs/events.md, "Secrets").
	secrets := secret.NewSet()
	log := slog.New(secret.Handler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}), secrets))
	if *maxSandboxes < 0 || *maxConns < 0 || *headerTimeout <= 0 || *idleTimeout <= 0 || *bodyTimeout <= 0 {
		fmt.Fprintln(os.Stderr, "limbs serve: --max-sandboxes and --max-conns must be 0 (no cap) or more, the timeouts more than 0")
		return 2
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, log, serveConfig{
		listen: *listen, allowRemote: *allowRemote, token: cmp.Or(*token, os.Getenv("LIMBS_TOKEN")), stateDir: *stateDir,
		provider: *providerName, pool: pool, limbsd: *limbsdPath, isolation: *isolation,
		workspaceRoots: roots, maxSandboxes: *maxSandboxes, bodyTimeout: *bodyTimeout,
		http:      control.HTTPLimits{HeaderTimeout: *headerTimeout, IdleTimeout: *idleTimeout, MaxConns: *maxConns},
		maxDiskMB: diskMB[0], maxSessionDiskMB: diskMB[1], mcp: mcpFlags,
		metricsPublic: *metricsPublic,
		secrets:       secrets, eventsMaxSize: evSize, eventsMaxAge: ageBound, eventsKeepDeleted: *evKeepDeleted, checkpointTTL: ckptTTL(*checkpointTTLFlag), forkCopy: *forkCopy,
		eventsFollow: *evFollow,
	}); err != nil {
		fmt.Fprintf(os.Stderr, "limbs serve: %v\n", err)
		return 1
	}
	return 0
}

type serveConfig struct {
	listen, token, stateDir, provider, limbsd, isolation string
	allowRemote                                          bool
	pool                                                 map[string]int
	workspaceRoots                                       []string
	maxSandboxes                                         int
	bodyTimeout                                          time.Duration
	http                                                 control.HTTPLimits
	maxDiskMB, maxSessionDiskMB                          int64 // 0: limbsd's defaults
	mcp                                                  *mcpServeFlags
	metricsPublic                                        bool // /metrics without the token
	secrets                                              *secret.Set
	eventsMaxSize                                        int64 // -1: no bound
	eventsMaxAge, eventsKeepDeleted                      time.Duration
	checkpointTTL                                        time.Duration
	forkCopy                                             bool
	eventsFollow                                         bool // follow limbsd's journals (--events-follow)
}

// rootsFlag collects repeated --workspace-root DIR, each an existing
// absolute directory.
type rootsFlag []string

func (r *rootsFlag) String() string { return strings.Join(*r, ",") }

func (r *rootsFlag) Set(v string) error {
	if !filepath.IsAbs(v) {
		return fmt.Errorf("%q: a workspace root is an absolute path, e.g. --workspace-root /srv/limbs", v)
	}
	if fi, err := os.Stat(v); err != nil || !fi.IsDir() {
		return fmt.Errorf("%q is not an existing directory; create it first", v)
	}
	*r = append(*r, filepath.Clean(v))
	return nil
}

func serve(ctx context.Context, log *slog.Logger, cfg serveConfig) error {
	if err := os.MkdirAll(cfg.stateDir, 0o700); err != nil {
		return fmt.Errorf("creating --state-dir: %w; pass a writable --state-dir", err)
	}
	limbsd, err := findLimbsd(cfg.limbsd)
	if err != nil {
		return err
	}
	token, err := serveToken(cfg.token, cfg.stateDir)
	if err != nil {
		return err
	}
	// Each provider keeps its sandboxes' directories (limbsd's socket and
	// state) under sandboxes/ID of the state dir, and injects limbsd.
	providers := map[string]control.Provider{}
	sandboxes := filepath.Join(cfg.stateDir, "sandboxes")
	lp, err := local.New(local.Options{
		Root:       sandboxes,
		Isolation:  cfg.isolation,
		Hide:       []string{cfg.stateDir},
		LimbsdPath: limbsd,
		Logger:     log,
	})
	if err != nil {
		return err
	}
	providers["local"] = lp
	defaultProvider, defaultImage := "local", localImage
	if cfg.provider == "" || cfg.provider == "docker" {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		dp, err := docker.New(dctx, docker.Options{Logger: log, SocketRoot: sandboxes, LimbsdPath: limbsd})
		cancel()
		switch {
		case err == nil:
			defer dp.Close()
			providers["docker"] = dp
			defaultProvider, defaultImage = "docker", docker.DefaultImage
		case cfg.provider == "docker":
			return err
		default:
			fmt.Fprintf(os.Stderr, "limbs serve: no Docker engine (%v); sandboxes run with the local provider\n", err)
		}
	} else if cfg.provider != "local" {
		return fmt.Errorf("--provider %q: use docker or local", cfg.provider)
	}
	if defaultProvider == "local" && !lp.Isolated() {
		fmt.Fprintln(os.Stderr, "limbs serve: local sandboxes are NOT isolated: "+lp.Why())
	}

	ln, err := endpoint.Listen(cfg.listen, endpoint.ListenOptions{
		AllowRemote: cfg.allowRemote, Example: "unix:///run/limbs/serve.sock", Name: "limbs serve",
	})
	if err != nil {
		return err
	}
	defer ln.Close()
	plane, err := control.NewPlane(ctx, control.Options{
		StateDir:        cfg.stateDir,
		Token:           token,
		Providers:       providers,
		DefaultProvider: defaultProvider,
		DefaultImage:    defaultImage,
		Pool:            cfg.pool,
		MaxSandboxes:    cfg.maxSandboxes,
		WorkspaceRoots:  cfg.workspaceRoots,
		BodyTimeout:     cfg.bodyTimeout,
		Logger:          log,

		MaxDiskMB:        cfg.maxDiskMB,
		MaxSessionDiskMB: cfg.maxSessionDiskMB,

		EventsMaxSize:     cfg.eventsMaxSize,
		EventsMaxAge:      cfg.eventsMaxAge,
		EventsKeepDeleted: cfg.eventsKeepDeleted,
		CheckpointTTL:     cfg.checkpointTTL,
		ForkCopy:          cfg.forkCopy,
		NoEventFollow:     !cfg.eventsFollow,
		Secrets:           cfg.secrets,
	})
	if err != nil {
		return err
	}
	defer plane.Close()
	srv := control.NewServer(plane)
	var h http.Handler = srv
	if cfg.mcp != nil {
		if h, err = cfg.mcp.mount(h, plane, token, log); err != nil {
			return err
		}
	}
	// The dashboard at / (internal/dashboard): its session cookie
	// authenticates only its own pages' requests; bearer clients pass
	// through it unchanged.
	dash, err := dashboard.New(dashboard.Options{Plane: plane, Token: token, API: h, Logger: log})
	if err != nil {
		return err
	}
	defer dash.Close()
	h, _ = withMetrics(dash, srv, token, cfg.metricsPublic)
	hs := control.NewHTTPServer(h, cfg.http, log)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(control.LimitListener(ln, cfg.http.MaxConns)) }()
	// The address bound, so that --listen 127.0.0.1:0 says which port.
	listen := cfg.listen
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		listen = a.String()
	}
	fmt.Fprintf(os.Stderr, "limbs serve: listening on %s (default provider %s, state dir %s)\n", listen, defaultProvider, cfg.stateDir)
	log.Debug("the Go runtime's sysmon", "kept_awake", sysmon.Awakened(), "why", "docs/control.md; GODEBUG=schedtrace=0 turns it off")
	if !strings.HasPrefix(cfg.listen, "unix:") {
		fmt.Fprintf(os.Stderr, "limbs serve: dashboard at http://%s/ (log in with the token)\n", listen)
	}
	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down; sandboxes keep running and are re-adopted on the next start")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
	}
	cfg.mcp.close() // the sandboxes made for MCP sessions go with them
	return nil
}

// defaultServeStateDir follows the file-system conventions: system state for
// root, the XDG state directory for anyone else.
func defaultServeStateDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/limbs/serve"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "limbs", "serve")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "limbs", "serve")
	}
	return filepath.Join(os.TempDir(), "limbs-serve")
}

// findLimbsd resolves --limbsd: the flag, else limbsd next to this
// executable, else on PATH.
func findLimbsd(flagValue string) (string, error) {
	if flagValue != "" {
		p, err := filepath.Abs(flagValue)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("--limbsd %s: %w; build it with `make build`", flagValue, err)
		}
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "limbsd")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("limbsd"); err == nil {
		return filepath.Abs(p)
	}
	return "", errors.New("no limbsd binary next to limbs nor on PATH: run `make build` (or CGO_ENABLED=0 go build -o bin/limbsd ./cmd/limbsd) and pass --limbsd bin/limbsd")
}

// tokenFile is where limbs serve keeps its generated token.
func tokenFile(stateDir string) string { return filepath.Join(stateDir, "token") }

// serveToken returns the flag's token, else the state dir's token file,
// else a new token written there (mode 0600) and printed once.
func serveToken(flagValue, stateDir string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	path := tokenFile(stateDir)
	if tok, err := endpoint.ReadTokenFile(path); err == nil {
		fmt.Fprintf(os.Stderr, "limbs serve: using the token in %s\n", path)
		return tok, nil
	}
	tok, err := endpoint.WriteTokenFile(path)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "limbs serve: generated a token (saved in %s, mode 0600):\n%s\n", path, tok)
	return tok, nil
}

// parseFlagsOnly parses the flags of a verb that takes no arguments. When
// ok is false the verb returns code: 0 after -h, 2 after a bad flag or a
// stray argument (said on stderr with what to run).
func parseFlagsOnly(fs *flag.FlagSet, args []string, verb string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "limbs %s: unexpected arguments %q; run 'limbs %s -h' for the flags\n", verb, fs.Args(), verb)
		return 2, false
	}
	return 0, true
}

// ckptTTL maps --checkpoint-ttl to Options.CheckpointTTL: 0 (keep until
// deleted) is a negative TTL there.
func ckptTTL(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// serveProcs is the GOMAXPROCS limbs serve runs with, or 0 to keep the
// runtime's: flag when given; else none when the GOMAXPROCS environment
// variable set it (env); else a quarter of the runtime's default (the
// CPUs, or the container's CPU limit), at least 1. limbs serve forwards
// and records; the work of a command is the sandbox's (its limbsd and
// shell spent three times limbs serve's CPU on each round trip,
// docs/bench.md), and on a small host the Go scheduler's idle threads
// spinning for work they will not find took CPU from the sandboxes: on 2
// cores, 1 cut limbs serve's CPU per forwarded command by a fifth and its
// round trip by some 8%.
func serveProcs(flag int, env bool, def int) int {
	switch {
	case flag > 0:
		return flag
	case env:
		return 0
	default:
		return max(1, def/4)
	}
}
