package perf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/creack/pty"
)

// roundTimeout bounds one round of a baseline: a command that never
// comes back fails the run instead of hanging it.
const roundTimeout = 30 * time.Second

// PTY is `bash -c SCRIPT` on a raw pseudo-terminal, read by the caller.
type PTY struct {
	F   *os.File // the master
	cmd *exec.Cmd
}

// StartPTY starts script on a new PTY.
func StartPTY(script string) (*PTY, error) {
	cmd := exec.Command("bash", "-c", script)
	f, err := pty.Start(cmd) // in a session of its own: Ctrl-C on the bench's terminal does not reach it
	if err != nil {
		return nil, fmt.Errorf("starting %q on a PTY: %w", script, err)
	}
	return &PTY{F: f, cmd: cmd}, nil
}

// Close kills the process and closes the PTY.
func (p *PTY) Close() {
	p.F.Close()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
}

// PingPong is the floor of a round trip: a line written to `cat` on a
// raw PTY and read back (the terminal's echo and cat's copy), rounds
// times, with nothing else between the two ends.
func PingPong(ctx context.Context, rounds int) ([]time.Duration, error) {
	p, err := StartPTY("exec cat")
	if err != nil {
		return nil, err
	}
	defer p.Close()
	line := []byte("ping\n")
	buf := make([]byte, 4096)
	one := func() error {
		if _, err := p.F.Write(line); err != nil {
			return err
		}
		for got := 0; got < 2; {
			n, err := p.F.Read(buf)
			if err != nil {
				return err
			}
			got += bytes.Count(buf[:n], []byte("\n"))
		}
		return nil
	}
	for range 20 { // warm up
		if err := one(); err != nil {
			return nil, err
		}
	}
	out := make([]time.Duration, 0, rounds)
	for range rounds {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		t0 := time.Now()
		if err := one(); err != nil {
			return out, fmt.Errorf("raw PTY ping-pong: %w", err)
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}

// ReadLoop is the floor of throughput: script run on a raw PTY and its
// output read until the end in 32 KiB reads. It returns how long that
// took and the bytes read.
func ReadLoop(ctx context.Context, script string) (time.Duration, int64, error) {
	t0 := time.Now()
	p, err := StartPTY(script)
	if err != nil {
		return 0, 0, err
	}
	defer p.Close()
	stop := context.AfterFunc(ctx, func() { p.F.Close() })
	defer stop()
	n, err := io.CopyBuffer(io.Discard, p.F, make([]byte, 32<<10))
	took := time.Since(t0)
	var pe *os.PathError
	if err != nil && (errors.Is(err, syscall.EIO) || errors.As(err, &pe)) && ctx.Err() == nil {
		err = nil // the end of the PTY's output: the slave side closed
	}
	return took, n, err
}

// DockerExec times `docker exec CONTAINER bash -c COMMAND`, rounds times:
// a new process in the container for each command, as agent tools built
// on the Docker API run them.
func DockerExec(ctx context.Context, container, command string, rounds int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, rounds)
	for range rounds {
		rctx, cancel := context.WithTimeout(ctx, roundTimeout)
		t0 := time.Now()
		b, err := exec.CommandContext(rctx, "docker", "exec", container, "bash", "-c", command).CombinedOutput()
		d := time.Since(t0)
		cancel()
		if err != nil {
			return out, fmt.Errorf("docker exec %s %q: %w: %s", container, command, err, b)
		}
		out = append(out, d)
	}
	return out, nil
}

// tmuxServer is a tmux server of its own, on a socket in a fresh
// directory, with one session "bench" running bash.
type tmuxServer struct {
	dir, sock string
}

func startTmux(ctx context.Context) (*tmuxServer, error) {
	if _, err := exec.LookPath("tmux"); err != nil {
		return nil, errors.New("tmux is not installed: apt-get install tmux (scripts/ci-setup.sh does)")
	}
	dir, err := os.MkdirTemp("", "limbs-bench-tmux-")
	if err != nil {
		return nil, err
	}
	t := &tmuxServer{dir: dir, sock: filepath.Join(dir, "tmux.sock")}
	if _, err := t.run(ctx, "new-session", "-d", "-s", "bench", "-x", "200", "-y", "50", "bash --norc --noprofile"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return t, nil
}

// run runs one tmux client command, as a runtime driving tmux does: a
// process per call.
func (t *tmuxServer) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "tmux", append([]string{"-S", t.sock, "-f", "/dev/null"}, args...)...)
	cmd.Env = append(os.Environ(), "TMUX=")
	b, err := cmd.CombinedOutput()
	if err != nil {
		return string(b), fmt.Errorf("tmux %s: %w: %s", strings.Join(args, " "), err, b)
	}
	return string(b), nil
}

func (t *tmuxServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = t.run(ctx, "kill-server")
	os.RemoveAll(t.dir)
}

// capture reads the pane and its history.
func (t *tmuxServer) capture(ctx context.Context) (string, error) {
	return t.run(ctx, "capture-pane", "-p", "-J", "-t", "bench", "-S", "-100")
}

// ended says whether pane shows the output of end marker mark.
func ended(pane, mark string) bool {
	return strings.Contains(pane, mark+"\n") || strings.HasSuffix(strings.TrimRight(pane, "\n "), mark)
}

// Sleep waits d, or until ctx ends (its error then).
func Sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// warmedRounds runs round rounds+1 times and returns how long each but
// the first took: round 0 warms up the shell (or waits out its start), as
// a session an agent has used a while would be. t0 is the round's start.
func warmedRounds(rounds int, round func(i int, t0 time.Time) error) ([]time.Duration, error) {
	out := make([]time.Duration, 0, rounds)
	for i := range rounds + 1 {
		t0 := time.Now()
		if err := round(i, t0); err != nil {
			return out, err
		}
		if i > 0 {
			out = append(out, time.Since(t0))
		}
	}
	return out, nil
}

// awaitEnd reads the pane until mark's output shows: first after first,
// then every interval, for at most roundTimeout from t0.
func (t *tmuxServer) awaitEnd(ctx context.Context, command, mark string, t0 time.Time, first, interval time.Duration) error {
	deadline := t0.Add(roundTimeout)
	for wait := first; ; wait = interval {
		if err := Sleep(ctx, wait); err != nil {
			return err
		}
		pane, err := t.capture(ctx)
		if err != nil {
			return err
		}
		if ended(pane, mark) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("tmux: the end of %q never showed in the pane:\n%s", command, pane)
		}
	}
}

// endMarker is the line typed after command in round i, and the output
// it prints. The marker is typed as `echo __d""one_N` so that the echo
// of what was typed never matches.
func endMarker(command string, i int) (line, mark string) {
	return command + `; echo __d""one_` + strconv.Itoa(i), "__done_" + strconv.Itoa(i)
}

// TmuxPoll times a command run in tmux polled every interval: a tmux
// server of its own with one bash session; each round types the command
// and an end marker with send-keys, then reads the pane with capture-pane
// every interval, the first read one interval after the keys, until the
// marker's output is there. This is the baseline the targets name; see
// TmuxOpenHands for OpenHands' own loop, which reads once at once.
func TmuxPoll(ctx context.Context, command string, rounds int, interval time.Duration) ([]time.Duration, error) {
	t, err := startTmux(ctx)
	if err != nil {
		return nil, err
	}
	defer t.close()
	return warmedRounds(rounds, func(i int, t0 time.Time) error {
		line, mark := endMarker(command, i)
		if _, err := t.run(ctx, "send-keys", "-t", "bench", line, "Enter"); err != nil {
			return err
		}
		return t.awaitEnd(ctx, command, mark, t0, interval, interval)
	})
}

// TmuxOpenHands times a command run the way OpenHands' tmux runtime
// (its V0 line's openhands/runtime/utils/bash.py, BashSession.execute)
// runs one, in its steps: read the pane once before typing; type the command with
// send-keys and then Enter with a second send-keys (as libtmux's
// send_keys(cmd, enter=True) does); read the pane at once and then every
// interval until the command's end shows; then clear the screen for the
// next command (send-keys C-l, a pause of settle, clear-history), which
// OpenHands does before it hands back the result. Its end is a PS1 it
// sets (which runs pwd and which python in subshells at every prompt);
// here it is the same typed end marker as TmuxPoll's, which is kinder to
// OpenHands.
func TmuxOpenHands(ctx context.Context, command string, rounds int, interval, settle time.Duration) ([]time.Duration, error) {
	t, err := startTmux(ctx)
	if err != nil {
		return nil, err
	}
	defer t.close()
	return warmedRounds(rounds, func(i int, t0 time.Time) error {
		line, mark := endMarker(command, i)
		if _, err := t.capture(ctx); err != nil {
			return err
		}
		if _, err := t.run(ctx, "send-keys", "-t", "bench", line); err != nil {
			return err
		}
		if _, err := t.run(ctx, "send-keys", "-t", "bench", "Enter"); err != nil {
			return err
		}
		if err := t.awaitEnd(ctx, command, mark, t0, 0, interval); err != nil {
			return err
		}
		if _, err := t.run(ctx, "send-keys", "-t", "bench", "C-l"); err != nil {
			return err
		}
		if err := Sleep(ctx, settle); err != nil {
			return err
		}
		_, err := t.run(ctx, "clear-history", "-t", "bench")
		return err
	})
}

// Silence times a command run the way many agent tools run one: typed
// into bash on a PTY, its end guessed when no output came for quiet.
func Silence(ctx context.Context, command string, rounds int, quiet time.Duration) ([]time.Duration, error) {
	p, err := StartPTY("exec bash --norc --noprofile -i")
	if err != nil {
		return nil, err
	}
	defer p.Close()
	type chunk struct {
		at  time.Time
		err error
	}
	arrivals := make(chan chunk, 1024)
	go func() { // the PTY's one reader; it ends when Close closes the PTY
		buf := make([]byte, 32<<10)
		for {
			_, err := p.F.Read(buf)
			select {
			case arrivals <- chunk{time.Now(), err}:
			default: // a round only needs the latest arrival
			}
			if err != nil {
				return
			}
		}
	}()
	return warmedRounds(rounds, func(int, time.Time) error {
		if _, err := p.F.WriteString(command + "\n"); err != nil {
			return err
		}
		timer := time.NewTimer(quiet)
		defer timer.Stop()
		deadline := time.After(roundTimeout)
		for {
			select {
			case c := <-arrivals:
				if c.err != nil {
					return fmt.Errorf("the shell's PTY: %w", c.err)
				}
				timer.Reset(quiet)
			case <-timer.C:
				return nil
			case <-deadline:
				return fmt.Errorf("%q never fell silent for %s", command, quiet)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	})
}

// DockerRun times `docker run --rm --network none IMAGE true`, rounds
// times, each container labelled limbs.managed=true.
func DockerRun(ctx context.Context, image string, rounds int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, rounds)
	for range rounds {
		rctx, cancel := context.WithTimeout(ctx, roundTimeout)
		name := "limbs-bench-run-" + randomToken()[:12]
		t0 := time.Now()
		b, err := exec.CommandContext(rctx, "docker", "run", "--rm", "--name", name, "--network", "none", "--label", "limbs.managed=true", image, "true").CombinedOutput()
		d := time.Since(t0)
		cancel()
		if err != nil {
			// A client cut off (Ctrl-C) leaves the container behind.
			cctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			_, _ = docker(cctx, "rm", "-f", name)
			cancel()
			return out, fmt.Errorf("docker run --rm %s true: %w: %s", image, err, b)
		}
		out = append(out, d)
	}
	return out, nil
}
