package load

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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
)

// serve is `limbs serve` as a child process of this run, on a Unix socket
// in a state dir of its own. It can be killed with SIGKILL and started
// again on the same state dir, as an operator's crash would.
type serve struct {
	bin, provider, token string
	dir                  string // the run's temporary directory
	state                string // dir/state: serve's --state-dir
	addr                 string // unix://dir/serve.sock
	logPath              string
	extra                []string // more flags of serve

	mu     sync.Mutex // guards the fields below
	cmd    *exec.Cmd
	exited chan struct{}
	starts int
}

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// startServe makes the run's directory and starts serve in it. The caller
// removes the directory (close) however the run ends.
func startServe(ctx context.Context, bin, provider string, extra ...string) (*serve, error) {
	dir, err := os.MkdirTemp("", "lb")
	if err != nil {
		return nil, err
	}
	s := &serve{bin: bin, provider: provider, token: newToken(), dir: dir,
		state: filepath.Join(dir, "state"), addr: "unix://" + filepath.Join(dir, "serve.sock"),
		logPath: filepath.Join(dir, "serve.log"), extra: extra}
	if err := s.start(ctx); err != nil {
		s.kill()
		return s, err
	}
	return s, nil
}

func (s *serve) start(ctx context.Context) error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	_ = os.Remove(strings.TrimPrefix(s.addr, "unix://"))
	args := []string{"serve", "--listen", s.addr, "--token", s.token,
		"--state-dir", s.state, "--provider", s.provider, "--log-level", "warn"}
	cmd := exec.Command(s.bin, append(args, s.extra...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a Ctrl-C at the terminal reaches this run,
	// which removes the sandboxes through serve before it stops it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s serve: %w", s.bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.starts++
	s.mu.Unlock()
	c := s.client("")
	deadline := time.Now().Add(90 * time.Second)
	for i := 0; ; i++ {
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.Health(hctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("limbs serve exited at start; its log, %s:\n%s", s.logPath, s.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) || i > 2000 {
			return fmt.Errorf("limbs serve did not answer within 90 s: %v; its log is %s", err, s.logPath)
		}
	}
}

// pid is the running serve's process id (0 when none runs).
func (s *serve) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	select {
	case <-s.exited:
		return 0
	default:
		return s.cmd.Process.Pid
	}
}

// kill sends SIGKILL to the serve this run started, by its PID, and waits
// for it to be reaped.
func (s *serve) kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
	default:
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	}
}

// stop ends serve gracefully (SIGTERM), then with SIGKILL after 30 s.
func (s *serve) stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		s.kill()
	}
}

func (s *serve) client(prefix string) *client.Client {
	c, _ := client.New(s.addr, s.token, prefix)
	return c
}

// waitHealthy waits, at most within, for serve to answer.
func (s *serve) waitHealthy(ctx context.Context, within time.Duration) error {
	c := s.client("")
	defer c.HTTPClient().CloseIdleConnections()
	deadline := time.Now().Add(within)
	for {
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.Health(hctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("limbs serve does not answer: %w", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// goroutines is go_goroutines of serve's /metrics.
func (s *serve) goroutines(ctx context.Context) (int, error) {
	c := s.client("")
	defer c.HTTPClient().CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(c.Base(), "/v1")+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			return strconv.Atoi(strings.TrimSpace(rest))
		}
	}
	return 0, errors.New("GET /metrics has no go_goroutines")
}

// instance is the control plane's instance id, read from its registry
// once no serve holds it.
func (s *serve) instance() (string, error) {
	if s.pid() != 0 {
		return "", errors.New("limbs serve still holds its registry")
	}
	path := filepath.Join(s.state, "limbs.db")
	if _, err := os.Stat(path); err != nil {
		return "", err
	}
	db, err := store.Open(path)
	if err != nil {
		return "", err
	}
	defer db.Close()
	return db.Instance(), nil
}

func (s *serve) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// warnings counts the warnings and errors serve logged, by message.
func (s *serve) warnings() map[string]int {
	b, _ := os.ReadFile(s.logPath)
	out := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, "level=WARN") && !strings.Contains(line, "level=ERROR") {
			continue
		}
		msg := line
		if _, rest, ok := strings.Cut(line, "msg="); ok {
			if unq, err := strconv.QuotedPrefix(rest); err == nil {
				msg, _ = strconv.Unquote(unq)
			} else {
				msg, _, _ = strings.Cut(rest, " ")
			}
		}
		if len(out) < 50 || out[msg] > 0 {
			out[msg]++
		}
	}
	return out
}
