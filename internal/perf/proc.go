package perf

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/store"
	"github.com/limbs-dev/limbs/internal/wire"
)

// cleanupTimeout bounds each Close: a run interrupted with Ctrl-C still
// removes what it made, with a context of its own.
const cleanupTimeout = 2 * time.Minute

// proc is a child process in a process group of its own (Ctrl-C on the
// terminal reaches the bench, which then stops its children in order), its
// output kept in a bounded buffer for error messages.
type proc struct {
	cmd    *exec.Cmd
	logs   *tail
	exited chan struct{}
}

func startProc(bin string, args, env []string) (*proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	logs := &tail{max: 64 << 10}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	p := &proc{cmd: cmd, logs: logs, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// stop sends SIGTERM, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex // guards b
	b   []byte
	max int
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// waitUntil polls ok every 20 ms until it holds, p exits, or timeout.
func waitUntil(ctx context.Context, p *proc, what string, timeout time.Duration, ok func() bool) error {
	deadline := time.Now().Add(timeout)
	for !ok() {
		select {
		case <-p.exited:
			return fmt.Errorf("%s: the process exited:\n%s", what, p.logs.String())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s:\n%s", what, timeout, p.logs.String())
		}
	}
	return nil
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Limbsd is a limbsd binary running on a Unix socket in a fresh directory,
// as in a sandbox but on the host.
type Limbsd struct {
	Dir    string // holds the socket, workspace/ and state/; removed by Close
	Sock   string
	Token  string
	PID    int
	Client *client.Client
	p      *proc
}

// StartLimbsd runs bin (a static limbsd) with env added to the
// environment, and returns once it answers GET /v1/health.
func StartLimbsd(ctx context.Context, bin string, env ...string) (*Limbsd, error) {
	// Not under a long path: a Unix socket's path has room for ~108 bytes.
	dir, err := os.MkdirTemp("", "limbs-bench-")
	if err != nil {
		return nil, err
	}
	l := &Limbsd{Dir: dir, Sock: filepath.Join(dir, "limbsd.sock"), Token: randomToken()}
	l.p, err = startProc(bin, []string{"--listen", "unix://" + l.Sock, "--token", l.Token,
		"--workdir", filepath.Join(dir, "workspace"), "--state-dir", filepath.Join(dir, "state")}, env)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	l.PID = l.p.cmd.Process.Pid
	l.Client, _ = client.New("unix://"+l.Sock, l.Token, "")
	err = waitUntil(ctx, l.p, "limbsd answering on "+l.Sock, 30*time.Second, func() bool {
		_, err := l.Client.Health(ctx)
		return err == nil
	})
	if err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Session creates a session and returns its id.
func (l *Limbsd) Session(ctx context.Context, name string) (string, error) {
	s, err := l.Client.CreateSession(ctx, wire.CreateSession{Name: name})
	return s.ID, err
}

// Close stops limbsd (SIGTERM, SIGKILL after 10 s) and removes its
// directory.
func (l *Limbsd) Close() {
	l.p.stop(10 * time.Second)
	os.RemoveAll(l.Dir)
}

// ServeOptions say how StartServe runs `limbs serve`.
type ServeOptions struct {
	Limbs    string         // the limbs binary (os.Executable() in the CLI)
	Limbsd   string         // the static limbsd it runs in sandboxes
	Provider string         // docker or local
	Pool     map[string]int // --pool IMAGE=N
	Args     []string       // more flags
}

// Serve is a `limbs serve` on a loopback port with a state directory of
// its own. Close removes every sandbox it made, stops it, and removes
// whatever containers and volumes of its instance are left, and its state.
type Serve struct {
	Addr, Token, Dir string
	Instance         string // its limbs.instance label
	PID              int
	Ctl              *client.Client // the control plane
	p                *proc
}

// StartServe runs `limbs serve` and returns once it answers GET /v1/health.
func StartServe(ctx context.Context, o ServeOptions) (*Serve, error) {
	dir, err := os.MkdirTemp("", "limbs-bench-serve-")
	if err != nil {
		return nil, err
	}
	// The registry made here first, to learn the instance id its
	// containers will carry, for the cleanup of an interrupted run.
	db, err := store.Open(filepath.Join(dir, "limbs.db"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Serve{Dir: dir, Token: randomToken(), Instance: db.Instance()}
	db.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.Addr = ln.Addr().String()
	ln.Close()
	args := []string{"serve", "--listen", s.Addr, "--token", s.Token, "--state-dir", dir, "--log-level", "warn",
		"--limbsd", o.Limbsd, "--max-sandboxes", "0"}
	if o.Provider != "" {
		args = append(args, "--provider", o.Provider)
	}
	for image, n := range o.Pool {
		args = append(args, "--pool", image+"="+strconv.Itoa(n))
	}
	args = append(args, o.Args...)
	s.p, err = startProc(o.Limbs, args, nil)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.PID = s.p.cmd.Process.Pid
	s.Ctl, _ = client.New(s.Addr, s.Token, "")
	err = waitUntil(ctx, s.p, "limbs serve answering on "+s.Addr, time.Minute, func() bool {
		_, err := s.Ctl.Health(ctx)
		return err == nil
	})
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Sandbox is a sandbox of a Serve, with a client of its limbsd through
// limbs serve.
type Sandbox struct {
	ID        string
	Container string // the Docker container's id ("" for the local provider)
	Client    *client.Client
}

// NewSandbox creates a sandbox and returns once its limbsd answers.
func (s *Serve) NewSandbox(ctx context.Context, req wire.CreateSandbox) (*Sandbox, error) {
	sb, err := s.Ctl.Sandboxes().Create(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("creating a sandbox through limbs serve: %w", err)
	}
	out := &Sandbox{ID: sb.ID, Client: s.Ctl.Sandbox(sb.ID)}
	if sb.Provider == "docker" {
		out.Container, _ = ContainerOf(ctx, sb.ID)
	}
	return out, nil
}

// Remove removes a sandbox.
func (s *Serve) Remove(ctx context.Context, id string) error {
	return s.Ctl.Sandboxes().Remove(ctx, id)
}

// PoolReady reads limbs_pool_ready of image from /metrics.
func (s *Serve) PoolReady(ctx context.Context, image string) (int, error) {
	var n int
	err := s.metrics(ctx, func(line string) {
		if v, ok := strings.CutPrefix(line, `limbs_pool_ready{image="`+image+`"} `); ok {
			f, _ := strconv.ParseFloat(v, 64)
			n = int(f)
		}
	})
	return n, err
}

func (s *Serve) metrics(ctx context.Context, fn func(line string)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.Addr+"/metrics", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := s.Ctl.HTTPClient().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fn(sc.Text())
	}
	return sc.Err()
}

// Close removes the sandboxes (through the API, then whatever containers
// and volumes carry its instance label), stops limbs serve and removes its
// state directory.
func (s *Serve) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if l, err := s.Ctl.Sandboxes().List(ctx); err == nil {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for _, sb := range l {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				_ = s.Remove(ctx, sb.ID)
			}()
		}
		wg.Wait()
	}
	s.p.stop(30 * time.Second)
	RemoveInstance(ctx, s.Instance)
	os.RemoveAll(s.Dir)
}

// Logs is the tail of limbs serve's output.
func (s *Serve) Logs() string { return s.p.logs.String() }

// ContainerOf is the id of the Docker container of a sandbox.
func ContainerOf(ctx context.Context, sandboxID string) (string, error) {
	out, err := docker(ctx, "ps", "-aq", "--no-trunc", "--filter", "label=limbs.managed=true", "--filter", "label=limbs.sandbox="+sandboxID)
	id := strings.TrimSpace(out)
	if err == nil && (id == "" || strings.Contains(id, "\n")) {
		err = fmt.Errorf("sandbox %s has %d containers", sandboxID, len(strings.Fields(id)))
	}
	return id, err
}

// RemoveInstance removes the containers and volumes labelled with a
// control plane's instance id: what a run killed half way left.
func RemoveInstance(ctx context.Context, instance string) {
	if instance == "" {
		return
	}
	filter := []string{"--filter", "label=limbs.managed=true", "--filter", "label=limbs.instance=" + instance}
	if out, err := docker(ctx, append([]string{"ps", "-aq"}, filter...)...); err == nil {
		if ids := strings.Fields(out); len(ids) > 0 {
			_, _ = docker(ctx, append([]string{"rm", "-f", "-v"}, ids...)...)
		}
	}
	if out, err := docker(ctx, append([]string{"volume", "ls", "-q"}, filter...)...); err == nil {
		if ids := strings.Fields(out); len(ids) > 0 {
			_, _ = docker(ctx, append([]string{"volume", "rm", "-f"}, ids...)...)
		}
	}
}

// docker runs the docker CLI and returns its stdout; the error carries
// its stderr.
func docker(ctx context.Context, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// RSS is a process's resident set (VmRSS), in bytes.
func RSS(pid int) (int64, error) {
	return statusField(pid, "VmRSS")
}

func statusField(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, ln := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(ln, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// MiB is bytes in MiB.
func MiB(b int64) float64 { return float64(b) / (1 << 20) }

// ErrNoDocker is returned by what needs a Docker engine when none answers.
var ErrNoDocker = errors.New("no Docker engine answers (start one with scripts/docker-up.sh) or the image is missing (scripts/build-base-image.sh)")

// DockerReady says whether the engine answers and has image.
func DockerReady(ctx context.Context, image string) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if _, err := docker(ctx, "image", "inspect", "--format", "{{.Id}}", image); err != nil {
		return fmt.Errorf("%w: %v", ErrNoDocker, err)
	}
	return nil
}

var _ io.Writer = (*tail)(nil)
