package shell

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/limbs-dev/limbs/internal/screen"
	"github.com/limbs-dev/limbs/internal/wire"
)

// options of the exec family, with the documented defaults.
func durationOf(v *float64, def float64, what string) (time.Duration, error) {
	f := def
	if v != nil {
		f = *v
	}
	if f < 0 || f > 1e7 {
		return 0, fmt.Errorf("%s must be a number of seconds >= 0, got %v: %w", what, f, wire.ErrBadRequest)
	}
	return time.Duration(f * float64(time.Second)), nil
}

// waitOptions reads yield_after and max_output, with their defaults.
func waitOptions(yieldAfter *float64, maxOutput *int) (time.Duration, int, error) {
	yield, err := durationOf(yieldAfter, wire.DefaultYieldAfter, "yield_after")
	if err != nil {
		return 0, 0, err
	}
	maxOut, err := maxOutputOf(maxOutput)
	return yield, maxOut, err
}

// begin is what typing into the shell starts with (exec, input): the
// wait options read, and the live shell, started if there is none.
func (s *Session) begin(ctx context.Context, yieldAfter *float64, maxOutput *int) (*proc, time.Duration, int, error) {
	yield, maxOut, err := waitOptions(yieldAfter, maxOutput)
	if err != nil {
		return nil, 0, 0, err
	}
	p, err := s.shell(ctx)
	return p, yield, maxOut, err
}

func maxOutputOf(v *int) (int, error) {
	if v == nil {
		return wire.DefaultMaxOutput, nil
	}
	if *v < 0 {
		return 0, fmt.Errorf("max_output must be >= 0, got %d: %w", *v, wire.ErrBadRequest)
	}
	return *v, nil
}

// Exec runs a command (wire.ErrBusy while another one runs).
func (s *Session) Exec(ctx context.Context, req wire.Exec) (wire.Result, error) {
	if strings.TrimSpace(req.Command) == "" {
		return wire.Result{}, fmt.Errorf("command is empty: pass the shell text to run in \"command\": %w", wire.ErrBadRequest)
	}
	if strings.ContainsRune(req.Command, 0) {
		return wire.Result{}, fmt.Errorf("command contains a NUL byte, which no shell can run: %w", wire.ErrBadRequest)
	}
	timeout, err := durationOf(&req.Timeout, 0, "timeout")
	if err != nil {
		return wire.Result{}, err
	}
	until, err := compileUntil(req.Until)
	if err != nil {
		return wire.Result{}, err
	}
	p, yield, maxOut, err := s.begin(ctx, req.YieldAfter, req.MaxOutput)
	if err != nil {
		return wire.Result{}, err
	}
	s.mu.Lock()
	busy := s.cur != nil
	s.mu.Unlock()
	if !busy {
		if err := s.awaitIdleShell(ctx, p); err != nil {
			return wire.Result{}, err
		}
	}
	s.mu.Lock()
	if s.cur != nil {
		id := s.cur.id
		s.mu.Unlock()
		return wire.Result{}, fmt.Errorf("session %q is running command %s: call wait to follow it, input to answer it, or interrupt to stop it: %w", s.name, id, wire.ErrBusy)
	}
	if s.p != p {
		s.mu.Unlock()
		return wire.Result{}, fmt.Errorf("the shell of session %q just exited; retry: %w", s.name, wire.ErrUnavailable)
	}
	c := s.newCommandLocked(req.Command)
	c.lastPid = lastPid() // before it is typed: its processes come after
	c.cleanMax = maxOut
	text := req.Command
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	var line string
	// The shell sources the command from a file: no typing cost, no
	// line-length limit, no continuation prompts. The shell has read the
	// whole file by the time it prints the start marker, and the file is
	// only rewritten when no command runs.
	script := filepath.Join(s.rdir, "cmd")
	if p.bash {
		// C-x C-l: the end file binds it to put runLine on the line and
		// accept it.
		line = "\x18\x0c"
		text = cmdPrefix + text
	} else {
		text = "printf '\\033]633;limbs;%s;S\\007' " + shq(s.token) + "\n" + text
		line = "\x15 . " + shq(script) + "\n"
	}
	if s.cmdFile == nil {
		s.cmdFile = newScratchFile(script, s.m.opts.Agent)
	}
	s.checkEndFileLocked()
	if err := s.cmdFile.write([]byte(text)); err != nil {
		s.mu.Unlock()
		return wire.Result{}, fmt.Errorf("writing the command file: %w", err)
	}
	s.cur = c
	s.watchLocked(c)
	if timeout > 0 {
		c.timer = time.AfterFunc(timeout, func() { s.stop(c, wire.StatusTimeout) })
	}
	s.mu.Unlock()
	if err := s.write(p, []byte(line)); err != nil {
		return wire.Result{}, fmt.Errorf("typing into the terminal: %w", err)
	}
	return s.await(ctx, c, yield, maxOut, until)
}

// Wait continues waiting for the running command (wire.ErrNoCommand when none).
func (s *Session) Wait(ctx context.Context, req wire.Wait) (wire.Result, error) {
	yield, maxOut, err := waitOptions(req.YieldAfter, req.MaxOutput)
	if err != nil {
		return wire.Result{}, err
	}
	until, err := compileUntil(req.Until)
	if err != nil {
		return wire.Result{}, err
	}
	s.mu.Lock()
	c := s.cur
	if c == nil {
		// A command that ended after its last result still owes its
		// caller the final result (exit code, remaining output), once.
		if l := s.last; l != nil && !l.reported {
			c = l
		}
	}
	s.mu.Unlock()
	if c == nil {
		return wire.Result{}, fmt.Errorf("nothing is running in session %q: start a command with exec: %w", s.name, wire.ErrNoCommand)
	}
	return s.await(ctx, c, yield, maxOut, until)
}

// await waits for c to end, for yield to pass, for c to wait for input,
// or for one of the until conditions to hold (until.go; nil: none).
func (s *Session) await(ctx context.Context, c *command, yield time.Duration, maxOut int, until *untilSpec) (wire.Result, error) {
	uctx, stopUntil := context.WithCancel(ctx)
	defer stopUntil()
	hits := s.watchUntil(uctx, c, until)
	deadline := time.Now().Add(afterEndMax) // untilafter.go
	var yieldC <-chan time.Time
	if yield > 0 {
		deadline = time.Now().Add(yield)
		t := time.NewTimer(yield)
		defer t.Stop()
		yieldC = t.C
	}
	quiet := time.NewTimer(s.untilQuiet(c))
	defer quiet.Stop()
	for {
		select {
		case <-c.done:
			r := s.result(ctx, c, maxOut, false)
			s.portAfterEnd(ctx, &r, until, deadline)
			return r, nil
		case h := <-hits:
			r := s.result(ctx, c, maxOut, false)
			h.apply(&r)
			return r, nil
		case <-yieldC:
			if s.recoverReplaced(c) {
				s.awaitReplaced(ctx, c)
				return s.result(ctx, c, maxOut, false), nil
			}
			if s.recoverEnd(c) {
				return s.result(ctx, c, maxOut, false), nil
			}
			return s.result(ctx, c, maxOut, s.waiting(c)), nil
		case <-quiet.C:
			d := s.untilQuiet(c)
			if d <= 0 {
				if s.recoverReplaced(c) {
					s.awaitReplaced(ctx, c)
					return s.result(ctx, c, maxOut, false), nil
				}
				if s.recoverEnd(c) {
					return s.result(ctx, c, maxOut, false), nil
				}
				if s.waiting(c) {
					return s.result(ctx, c, maxOut, true), nil
				}
				d = 250 * time.Millisecond
			}
			quiet.Reset(d)
		case <-ctx.Done():
			return wire.Result{}, ctx.Err()
		}
	}
}

// awaitReplaced waits for a replaced shell, killed, to end c.
func (s *Session) awaitReplaced(ctx context.Context, c *command) {
	t := time.NewTimer(replacedWait)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
	case <-ctx.Done():
	}
}

// untilQuiet is how long until neither output nor input has happened for
// quietPeriod.
func (s *Session) untilQuiet(c *command) time.Duration {
	last := max(s.lastOut.Load(), s.lastIn.Load(), c.typedAt.UnixNano())
	return time.Until(time.Unix(0, last).Add(quietPeriod))
}

func (s *Session) waiting(c *command) bool {
	s.mu.Lock()
	p := s.p
	running := s.cur == c && c.started
	s.mu.Unlock()
	if !running || p == nil || !p.waitingForInput() {
		return false
	}
	// The program went to sleep after printing all it printed. If that
	// was the end of the command (the shell back at its prompt), the end
	// marker is in the terminal or in the read loop's hands: give it the
	// moment it takes to arrive before calling this a prompt. Settled is
	// nothing unread in the terminal and no new output for settleOut;
	// each wait ends early on output or on the command's end, and the
	// checks back off, so a check costs a few wake-ups, not one a
	// millisecond.
	deadline := time.NewTimer(200 * time.Millisecond)
	defer deadline.Stop()
	backoff := time.Millisecond
	for range 64 {
		s.waitChecks.Add(1)
		end, ch := s.out.changed()
		pause := backoff
		quiet := p.unread() == 0
		if quiet {
			pause = settleOut
		} else {
			backoff = min(2*backoff, settleOut)
		}
		t := time.NewTimer(pause)
		select {
		case <-c.done:
			t.Stop()
			return false
		case <-deadline.C:
			t.Stop()
			return !isClosed(c.done)
		case <-ch:
			t.Stop()
			continue
		case <-t.C:
		}
		if quiet && p.unread() == 0 {
			if now, _ := s.out.changed(); now == end {
				break
			}
		}
	}
	return !isClosed(c.done)
}

// settleOut is how long the terminal stays quiet before a program asleep
// in a read of it is taken to wait for input rather than to be the end of
// the command whose marker is on its way.
const settleOut = 10 * time.Millisecond

// result reports c, handing over the output not returned before.
func (s *Session) result(ctx context.Context, c *command, maxOut int, waiting bool) wire.Result {
	s.mu.Lock()
	r := wire.Result{CommandID: c.id, LogPath: c.logPath, Cwd: s.cwd}
	var from, to int64
	var bgShell *proc // the shell whose processes background.go lists
	// What the read loop changes under s.mu, read once: the rest of the
	// result is built from this moment's state, part of it unlocked.
	ended := c.ended
	if ended {
		from, to = c.returned, c.endOff
		code := c.exitCode
		r.ExitCode = &code
		r.Status = c.status
		r.ShellExited = c.shellEnd
		if c.replaced {
			r.ExitCode = nil
			r.ShellReplaced = true
		}
		if c.recovered {
			r.EndRecovered, r.EndNote = true, c.endNote
			if c.codeLost {
				r.ExitCode = nil
			}
		}
		r.DurationMs = c.endAt.Sub(c.typedAt).Milliseconds()
		r.OffsetStart = c.startOff
		bgShell = s.p
	} else {
		r.Status = wire.StatusRunning
		r.WaitingForInput = waiting
		if waiting && s.p != nil {
			r.EchoOff = s.p.echoOff()
		}
		if waiting {
			s.noteWaitingLocked(c, true, r.EchoOff)
		}
		r.DurationMs = time.Since(c.typedAt).Milliseconds()
		if c.started {
			from, to = c.returned, s.out.size()
			r.OffsetStart = c.startOff
		} else {
			from, to = s.out.size(), s.out.size()
			r.OffsetStart = from
		}
	}
	// The final result of a command that returned nothing before (any
	// result drops c.clean), with the max_output it was started with, is
	// already cleaned: the read loop fed its output to c.clean as it
	// arrived.
	var pre *screen.Text
	if ended && c.clean != nil && c.cleanTo == to && c.cleanMax == maxOut {
		pre = c.clean
	}
	s.mu.Unlock()
	if !ended && to > from {
		to -= s.holdBack(from, to)
	}
	s.mu.Lock()
	if to > c.returned || ended {
		c.returned = max(c.returned, to)
	}
	if ended {
		c.reported = true
	}
	// Later results start after this one: the running cleaner no longer
	// matches them.
	c.clean = nil
	s.mu.Unlock()
	r.OffsetEnd = to
	if bgShell != nil {
		s.backgroundOf(c, bgShell, &r) // background.go
	}
	s.betweenResult(c, &r, maxOut)
	r.OutputBytes = to - r.OffsetStart
	if ls, ok := s.redrawStart(r.OffsetStart, from, to); ok {
		from, r.Overwrite, pre = ls, true, nil // view.go
	}
	r.ChunkStart = from
	if pre != nil {
		r.Output, r.Truncated = s.renderText(apiBase(ctx), pre, from, to, maxOut)
	} else {
		r.Output, r.Truncated = s.cleanRangeAt(apiBase(ctx), from, to, maxOut)
	}
	if !ended {
		s.liveView(&r, r.OffsetStart, to, maxOut) // view.go
	}
	// The log file is written from the stream off the command's path
	// (creating a file on a disk costs a millisecond). It is complete up
	// to offset_end before a result whose output is not all in `output`
	// goes out: a running or a truncated one; so is the log of an output
	// large enough to be cut, and every log once a write to the state
	// directory failed, so that the result can say what the log misses.
	big := s.logs.head > 0 && to-r.OffsetStart > 2*s.logs.head
	if (!ended || r.Truncated || big || s.out.troubled()) && r.OffsetStart >= 0 {
		s.writeLog(c, to)
		s.noteLog(c, &r)
	}
	return r
}

// writeLog brings c's log file up to stream offset upTo. A log that would
// hold more than twice its head (disk.go) keeps the head, and gets the
// tail of that size when the command ends; a log that cannot be written
// stays as it is, and its results say from where on it misses bytes.
func (s *Session) writeLog(c *command, upTo int64) {
	c.logMu.Lock()
	defer c.logMu.Unlock()
	s.mu.Lock()
	start, ended, end := c.startOff, c.ended, c.endOff
	s.mu.Unlock()
	if start < 0 || c.logFinal || c.logErr != nil {
		return
	}
	if ended {
		upTo = end
	}
	if c.logf == nil {
		f, err := os.OpenFile(c.logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, s.m.opts.Agent.logMode(0o600))
		if err != nil {
			c.logErr = err
			s.log.Warn("writing a command log", "command", c.id, "err", err)
			return
		}
		c.logf, c.logged = f, start
	}
	head := s.logs.head
	switch {
	case head <= 0 || (!c.logCut && upTo-start <= 2*head):
		s.appendLog(c, upTo)
	case !c.logCut:
		s.appendLog(c, start+head)
		if c.logErr == nil && c.logged > start+head {
			s.cutLog(c, head)
			c.logged = start + head
		}
		c.logCut = c.logErr == nil
	}
	if ended && c.logCut && c.logErr == nil && c.logTail == 0 {
		tail := max(c.logged, end-head)
		mark := c.logSize
		n, err := s.copyLog(c, tail, end)
		if err == nil && n == end-tail {
			c.logTail = tail
		} else {
			// Half a tail would leave a second gap: the log keeps its head.
			s.cutLog(c, mark)
			c.logErr = err
		}
	}
	if c.logErr != nil {
		s.log.Warn("writing a command log", "command", c.id, "err", c.logErr)
	}
	if ended && c.logErr == nil && (c.logTail > 0 || c.logged >= end) {
		c.logFinal = true
	}
}

// appendLog writes the bytes [c.logged, to) to c's log; logMu is held.
func (s *Session) appendLog(c *command, to int64) {
	if to <= c.logged {
		return
	}
	n, err := s.copyLog(c, c.logged, to)
	c.logged += n
	if err != nil {
		c.logErr = err
	}
}

// errDiskFull says that the sandbox's output bound is reached.
var errDiskFull = errors.New("the output this sandbox keeps on disk is at its bound (limbsd --max-disk) and this session holds no older output to drop")

// copyLog appends the stream's [from, to) to c's log file within the
// disk bounds; logMu is held.
func (s *Session) copyLog(c *command, from, to int64) (int64, error) {
	want := to - from
	got := s.logs.take(want)
	var n int64
	var err error
	if got > 0 {
		n, err = s.out.copyTo(c.logf, from, from+got)
	}
	s.logs.release(got - n)
	c.logSize += n
	if err == nil && n < want {
		err = errDiskFull
	}
	return n, err
}

// cutLog shortens c's log file to size bytes; logMu is held.
func (s *Session) cutLog(c *command, size int64) {
	if size >= c.logSize {
		return
	}
	if err := c.logf.Truncate(size); err != nil {
		return
	}
	_, _ = c.logf.Seek(size, io.SeekStart)
	s.logs.release(c.logSize - size)
	c.logSize = size
}

// noteLog tells r what c's log misses: the middle of a cut log, and
// everything from where writing it failed.
func (s *Session) noteLog(c *command, r *wire.Result) {
	c.logMu.Lock()
	defer c.logMu.Unlock()
	switch {
	case c.logErr != nil:
		r.LogIncomplete = true
		r.LogTruncated = c.logCut
		from := c.logged
		if c.logf == nil && c.logSize == 0 {
			from = r.OffsetStart
		}
		r.LogMissing = []int64{from, r.OffsetEnd}
		r.LogError = fmt.Sprintf("the command log misses bytes %d..%d of the output stream (it holds %d..%d): %v; free space in limbsd's --state-dir or delete sessions no longer needed; GET /v1/sessions/%s/output?from=%d&to=%d may still have them",
			from, r.OffsetEnd, r.OffsetStart, from, c.logErr, s.id, from, r.OffsetEnd)
	case c.logCut:
		r.LogTruncated = true
		to := r.OffsetEnd
		if c.logTail > 0 {
			to = c.logTail
		}
		r.LogMissing = []int64{c.logged, to}
	}
}

// closeLog completes and closes a finished command's log file.
func (s *Session) closeLog(c *command) {
	s.mu.Lock()
	start, end := c.startOff, c.endOff
	s.mu.Unlock()
	defer s.out.unkeep(start)
	c.logMu.Lock()
	empty := c.logf == nil && start >= 0 && end == start
	c.logMu.Unlock()
	if empty && s.linkEmptyLog(c.logPath) {
		// A link costs no bytes, but counts toward maxLogs.
		s.logs.closed(c.logPath, 0)
		return
	}
	s.writeLog(c, end)
	c.logMu.Lock()
	if c.logf != nil {
		c.logf.Close()
		c.logf = nil
		s.logs.closed(c.logPath, c.logSize)
	}
	c.logMu.Unlock()
}

// emptyLog is the file every log of a command that printed nothing is a
// hard link to. Creating a file costs a new inode, which on ext4 with many
// recently deleted files takes a millisecond of CPU; a link costs a
// directory entry (tens of microseconds).
const emptyLog = "empty.log"

// linkEmptyLog makes path a link to the session's empty log; false means
// the caller writes the file itself.
func (s *Session) linkEmptyLog(path string) bool {
	empty := filepath.Join(s.dir, emptyLog)
	err := os.Link(empty, path)
	if errors.Is(err, os.ErrNotExist) {
		if werr := os.WriteFile(empty, nil, s.m.opts.Agent.logMode(0o400)); werr != nil {
			return false
		}
		err = os.Link(empty, path)
	}
	return err == nil
}

// holdBack is how many bytes at the end of [from, to) to keep for the next
// result because they may be the first half of something: an escape
// sequence, a UTF-8 character, or a \r whose \n has not arrived.
func (s *Session) holdBack(from, to int64) int64 {
	n := min(to-from, 64)
	tail := make([]byte, n)
	got, _ := s.out.readAt(tail, to-n)
	return int64(unfinishedTail(tail[:got]))
}

// cleanRange renders [from, to) of the stream as a person would read it.
func (s *Session) cleanRange(from, to int64, maxOut int) (string, bool) {
	return s.cleanRangeAt("/v1", from, to, maxOut)
}

// cleanRangeAt is cleanRange with the API base the truncation note names.
func (s *Session) cleanRangeAt(base string, from, to int64, maxOut int) (string, bool) {
	if to <= from {
		return "", false
	}
	limit := maxOut
	if maxOut == 0 {
		limit = 1 // max_output 0: only the count
	}
	t := screen.NewText(limit)
	_, _ = io.Copy(t, s.out.skippingReader(from, to))
	return s.renderText(base, t, from, to, maxOut)
}

// renderText is the output of a cleaner fed [from, to), with the note of a
// truncated output saying where the whole of it is.
func (s *Session) renderText(base string, t *screen.Text, from, to int64, maxOut int) (string, bool) {
	if maxOut == 0 {
		return "", to > from
	}
	text, truncated, _ := t.ResultNote(s.truncationNote(base, from, to))
	return text, truncated
}

// stop interrupts c: SIGINT to the foreground job, then SIGTERM, then the
// hard stop that ends the rest of the command text too (stopcmd.go).
func (s *Session) stop(c *command, why string) {
	s.mu.Lock()
	if c.ended || c.stopping != "" {
		s.mu.Unlock()
		return
	}
	c.stopping = why
	p := s.p
	typed := c.typedAt
	s.mu.Unlock()
	if p == nil {
		return
	}
	since := ticksAt(typed)
	jobs := map[int]bool{} // the command's foreground jobs seen
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-c.done:
			return true
		case <-p.done:
			return true
		case <-t.C:
			return false
		}
	}
	for _, st := range []struct {
		sig   syscall.Signal
		grace time.Duration
	}{{syscall.SIGINT, graceInt}, {syscall.SIGTERM, graceTerm}} {
		if pg := p.foreground(); pg > 0 && pg != p.pid {
			jobs[pg] = true
		}
		p.signalForeground(st.sig)
		s.noteSignal(c, st.sig, why)
		if wait(st.grace) {
			// What the job left behind in its process groups (children
			// that ignore SIGINT) goes with it.
			if len(jobs) > 0 && isClosed(c.done) {
				p.killCommandProcs(since, jobs, time.Now().Add(killWait))
			}
			return
		}
	}
	// The hard stop: the shell is told first, so that it abandons the
	// rest of the command once its processes are gone.
	p.interruptShell()
	s.noteSignal(c, syscall.SIGKILL, why)
	if !p.killCommandProcs(since, nil, time.Now().Add(killWait)) {
		s.log.Warn("command's processes survived SIGKILL; killing the shell", "command", c.id)
		p.killTree()
		return
	}
	if wait(graceTerm) {
		return
	}
	s.log.Warn("the shell did not come back to its prompt after its command was killed; killing the shell", "command", c.id)
	p.killTree()
}

// Input types text and keys into the terminal.
func (s *Session) Input(ctx context.Context, req wire.Input) (wire.Result, error) {
	if req.Text == "" && len(req.Keys) == 0 {
		return wire.Result{}, fmt.Errorf("nothing to type: pass \"text\" and/or \"keys\": %w", wire.ErrBadRequest)
	}
	until, err := compileUntil(req.Until)
	if err != nil {
		return wire.Result{}, err
	}
	p, yield, maxOut, err := s.begin(ctx, req.YieldAfter, req.MaxOutput)
	if err != nil {
		return wire.Result{}, err
	}
	s.mu.Lock()
	b, err := encodeInput(req.Text, req.Keys, s.parser.appCursor.Load(), s.parser.paste.Load())
	c := s.cur
	seq := s.seq
	before := s.out.size()
	s.inputs++
	s.mu.Unlock()
	if err != nil {
		return wire.Result{}, err
	}
	s.lastIn.Store(time.Now().UnixNano())
	s.noteInput(p, viaInput, req.Text, req.Keys)
	if err := s.write(p, b); err != nil {
		return wire.Result{}, fmt.Errorf("typing into the terminal: %w", err)
	}
	if c != nil {
		return s.await(ctx, c, yield, maxOut, until)
	}
	// The shell was idle: the input may start a command (a line and
	// Enter); otherwise report what it printed once output settles.
	deadline := time.Now().Add(yield)
	for {
		s.mu.Lock()
		var started *command
		if s.seq != seq {
			started = s.cur
			if started == nil {
				started = s.last
			}
		}
		s.mu.Unlock()
		if started != nil {
			return s.await(ctx, started, max(time.Until(deadline), time.Millisecond), maxOut, until)
		}
		end, ch := s.out.changed()
		wait := settleIdle
		if yield > 0 {
			wait = min(wait, time.Until(deadline))
		}
		if wait <= 0 {
			return s.idleResult(ctx, before, end, maxOut), nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ch:
			t.Stop()
		case <-t.C:
			s.mu.Lock()
			changed := s.seq != seq
			s.mu.Unlock()
			if !changed {
				return s.idleResult(ctx, before, end, maxOut), nil
			}
		case <-ctx.Done():
			t.Stop()
			return wire.Result{}, ctx.Err()
		}
	}
}

func (s *Session) idleResult(ctx context.Context, from, to int64, maxOut int) wire.Result {
	s.mu.Lock()
	r := wire.Result{Status: wire.StatusExited, Cwd: s.cwd, OffsetStart: from, OffsetEnd: to, OutputBytes: to - from, ChunkStart: from}
	s.mu.Unlock()
	r.Output, r.Truncated = s.cleanRangeAt(apiBase(ctx), from, to, maxOut)
	return r
}

// Interrupt stops the running command (SIGINT, then escalation).
func (s *Session) Interrupt(ctx context.Context, req wire.Interrupt) (wire.Result, error) {
	maxOut, err := maxOutputOf(req.MaxOutput)
	if err != nil {
		return wire.Result{}, err
	}
	s.mu.Lock()
	c := s.cur
	s.mu.Unlock()
	if c == nil {
		return wire.Result{}, fmt.Errorf("nothing is running in session %q to interrupt: %w", s.name, wire.ErrNoCommand)
	}
	s.stop(c, wire.StatusInterrupted)
	select {
	case <-c.done:
	case <-time.After(readyWait):
	case <-ctx.Done():
		return wire.Result{}, ctx.Err()
	}
	return s.result(ctx, c, maxOut, false), nil
}
