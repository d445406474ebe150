package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/charmbracelet/x/term"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Exit codes of `limbs exec` besides the command's own.
const (
	exitUsage       = 2
	exitTimeout     = 124 // as timeout(1)
	exitLimbsFailed = 125 // as docker run: limbs itself failed, not the command
	exitInterrupted = 130
	exitTerminated  = 143 // 128 + SIGTERM: limbs exec was told to stop
)

// execChunk is how long one exec or wait call blocks before the CLI prints
// what arrived: output streams in chunks of at most this many seconds.
const execChunk = 1.0

func init() {
	commands["exec"] = command{
		summary: "run a command in a session, print its output, exit with its code",
		run:     runExec,
	}
}

func runExec(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("limbs exec", flag.ContinueOnError)
	cn := connectFlags(fs)
	timeout := fs.Float64("timeout", 0, "hard limit in seconds; on expiry the command is stopped and limbs exits 124 (0: none)")
	asJSON := fs.Bool("json", false, "print one Result JSON object (output joined from every chunk, as a terminal shows it) instead of the output")
	stdin := fs.Bool("stdin", stdinIsData(os.Stdin), "type standard input into the command, then Ctrl-D (default: on when stdin is a pipe or a file)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: limbs exec [flags] -- COMMAND...

Runs COMMAND (its words joined with spaces, as shell text) in a persistent
session: cd, variables and functions stay for the next exec. Prints the
output as it arrives and exits with the command's exit code; 124 when
--timeout stopped it, 130 when interrupted (Ctrl-C here interrupts it),
143 when limbs exec got SIGTERM (it interrupts the command first, as
Ctrl-C does), 125 when limbs itself failed.

When standard input is a pipe or a file, it is typed into the command as
at a terminal (the terminal echoes it), followed by Ctrl-D (end of file),
so that  echo data | limbs exec -- cat  ends. Use --stdin=false to keep
it out; use limbs cp for binary data or lines over 4095 bytes.

A command that waits for input is answered with limbs input, followed with
limbs wait, stopped with limbs interrupt; limbs screen shows its screen.

flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "limbs exec: no command given; usage: limbs exec [flags] -- COMMAND...")
		return exitUsage
	}
	cl, err := cn.client()
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs exec: %s\n", safeErr(err))
		return exitLimbsFailed
	}
	id, err := cn.session(ctx, cl)
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs exec: %s\n", safeErr(err))
		return exitLimbsFailed
	}
	// SIGTERM (a framework's subprocess timeout) stops the remote command
	// as Ctrl-C does; main's context would only abandon the call and
	// leave the session busy.
	ctx = context.WithoutCancel(ctx)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	e := &execRun{cl: cl, id: id, cn: cn, sig: sig, out: os.Stdout, stream: !*asJSON}
	if *stdin {
		e.stdin = os.Stdin
	}
	res, err := e.run(ctx, wire.Exec{Command: strings.Join(fs.Args(), " "), Timeout: *timeout})
	if errors.Is(err, wire.ErrBusy) {
		fmt.Fprintf(os.Stderr, "limbs exec: session %s is running another command: follow it with '%s', answer it with '%s TEXT', stop it with '%s', or use another --session\n",
			safe(cn.sessionName), cn.hint("wait"), cn.hint("input"), cn.hint("interrupt"))
		return exitLimbsFailed
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs exec: %s\n", safeErr(err))
		return exitLimbsFailed
	}
	if e.stdinLeft {
		fmt.Fprintln(os.Stderr, "\nlimbs exec: the command ended before all of standard input was typed; the rest was not sent")
	}
	return e.finish(res, *asJSON)
}

// finish reports the final result: what the log misses, the JSON when
// asked, and the exit code.
func (e *execRun) finish(res wire.Result, asJSON bool) int {
	if note := logNote(res); note != "" {
		fmt.Fprintf(os.Stderr, "\nlimbs: %s\n", note)
	}
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return exitLimbsFailed
		}
	}
	if e.signal == syscall.SIGTERM {
		return exitTerminated
	}
	return exitCodeOf(res)
}

// logNote says what the command's log file misses, or "" when it holds
// the whole output.
func logNote(r wire.Result) string {
	var missing string
	if len(r.LogMissing) == 2 {
		missing = fmt.Sprintf("bytes %d..%d of the session's output stream", r.LogMissing[0], r.LogMissing[1])
	}
	switch {
	case r.LogIncomplete:
		return fmt.Sprintf("the command's log %s is incomplete: it misses %s: %s", r.LogPath, missing, r.LogError)
	case r.LogTruncated:
		return fmt.Sprintf("the command's log %s was cut to its head and tail to keep the sandbox's disk bound (limbsd --max-session-disk): it misses %s", r.LogPath, missing)
	}
	return ""
}

// exitCodeOf maps a final result to the CLI's exit code.
func exitCodeOf(r wire.Result) int {
	switch r.Status {
	case wire.StatusTimeout:
		return exitTimeout
	case wire.StatusInterrupted:
		return exitInterrupted
	}
	if r.ExitCode != nil {
		return *r.ExitCode
	}
	return exitLimbsFailed
}

// execRun follows one command to its end.
type execRun struct {
	cl     *client.Client
	id     string
	cn     *conn
	sig    <-chan os.Signal
	out    io.Writer
	stream bool      // print each chunk as it arrives
	stdin  io.Reader // typed into the command, then Ctrl-D (nil: nothing)

	total     wire.Result // every chunk joined, as a terminal shows it
	chunks    int
	notified  bool      // told the user the command waits for input
	signal    os.Signal // what stopped limbs exec, if anything
	stdinLeft bool      // the command ended before stdin was all typed
}

// run executes req and keeps waiting while it runs. Ctrl-C (sig) abandons
// the call in flight, which leaves the command running, and interrupts it.
func (e *execRun) run(ctx context.Context, req wire.Exec) (wire.Result, error) {
	req.YieldAfter = yieldOf(execChunk)
	if e.stdin != nil {
		req.YieldAfter = yieldOf(0) // type stdin at once
	}
	return e.follow(ctx, func(ctx context.Context) (wire.Result, error) { return e.cl.Exec(ctx, e.id, req) })
}

// follow makes the first call (exec, input, wait, interrupt) and keeps
// waiting while the command runs.
func (e *execRun) follow(ctx context.Context, first func(context.Context) (wire.Result, error)) (wire.Result, error) {
	res, signalled, err := e.call(ctx, first)
	if e.stdin != nil && !signalled && err == nil && res.Status == wire.StatusRunning {
		e.add(res)
		res, signalled, err = e.typeStdin(ctx, res)
	}
	for {
		if signalled {
			res, err = e.interrupt(ctx)
			if err != nil {
				return wire.Result{}, err
			}
			e.add(res)
			return e.total, nil
		}
		if err != nil {
			return wire.Result{}, err
		}
		e.add(res)
		if res.Status != wire.StatusRunning {
			return e.total, nil
		}
		if res.WaitingForInput && !e.notified {
			e.notified = true
			fmt.Fprintf(os.Stderr, "\nlimbs: the command is waiting for input; answer it with '%s TEXT' (or attach with '%s'), or press Ctrl-C to interrupt it\n", e.cn.hint("input"), e.cn.hint("shell"))
		}
		res, signalled, err = e.call(ctx, func(ctx context.Context) (wire.Result, error) {
			return e.cl.Wait(ctx, e.id, wire.Wait{YieldAfter: yieldOf(execChunk)})
		})
	}
}

// call runs f, abandoning it when Ctrl-C arrives.
func (e *execRun) call(ctx context.Context, f func(context.Context) (wire.Result, error)) (wire.Result, bool, error) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		r   wire.Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := f(cctx)
		done <- answer{r, err}
	}()
	select {
	case a := <-done:
		return a.r, false, a.err
	case sig := <-e.sig:
		e.signal = sig
		cancel()
		<-done
		return wire.Result{}, true, nil
	}
}

// interrupt stops the command; when it ended on its own meanwhile, the
// output it left is fetched with one wait.
func (e *execRun) interrupt(ctx context.Context) (wire.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := e.cl.Interrupt(ctx, e.id, wire.Interrupt{})
	if !errors.Is(err, wire.ErrNoCommand) {
		return res, err
	}
	res, err = e.cl.Wait(ctx, e.id, wire.Wait{YieldAfter: yieldOf(0)})
	if errors.Is(err, wire.ErrNoCommand) {
		// Nothing ran (the exec never reached the daemon).
		return wire.Result{Status: wire.StatusInterrupted}, nil
	}
	return res, err
}

// add prints a chunk and folds it into the joined result. A chunk that
// overwrites (a \r progress bar redrawn across results) replaces the
// unfinished last line, on the terminal and in the joined output.
func (e *execRun) add(r wire.Result) {
	prev := e.total.Output
	if r.Overwrite && e.chunks > 0 {
		prev = prev[:strings.LastIndexByte(prev, '\n')+1]
		if e.stream {
			io.WriteString(e.out, clearLine(e.out))
		}
	}
	if e.stream && r.Output != "" {
		io.WriteString(e.out, r.Output)
	}
	out := prev + r.Output
	start, truncated := r.OffsetStart, r.Truncated
	if e.chunks > 0 {
		start = e.total.OffsetStart
		truncated = truncated || e.total.Truncated
	}
	e.total = r
	e.total.Output, e.total.OffsetStart, e.total.Truncated = out, start, truncated
	e.total.Overwrite = false
	e.chunks++
}

// clearLine returns to the start of the line: on a terminal the rest of
// the line is erased too, since the new text is the whole line.
func clearLine(w io.Writer) string {
	if f, ok := w.(*os.File); ok && term.IsTerminal(f.Fd()) {
		return "\r\x1b[K"
	}
	return "\r"
}

// stdinIsData reports whether f is a pipe or a regular file: data a script
// meant for the command, not a terminal or /dev/null.
func stdinIsData(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	m := fi.Mode()
	return m&os.ModeNamedPipe != 0 || m&os.ModeSocket != 0 || m.IsRegular() && fi.Size() > 0
}

// stdinChunk is how much of stdin one input call types.
const stdinChunk = 4 << 10

// typeStdin types e.stdin into the running command, then Ctrl-D (twice
// when the data does not end a line: the first only ends the line). It
// stops when the command ends: what a finished command did not read would
// reach the shell's prompt as commands.
func (e *execRun) typeStdin(ctx context.Context, res wire.Result) (wire.Result, bool, error) {
	buf := make([]byte, stdinChunk)
	last := byte('\n')
	for {
		n, rerr := io.ReadFull(e.stdin, buf)
		text := string(buf[:n])
		if n > 0 {
			last = buf[n-1]
		}
		if rerr != nil { // the end of stdin: end of file for the program
			text += "\x04"
			if last != '\n' {
				text += "\x04"
			}
		}
		var signalled bool
		var err error
		res, signalled, err = e.call(ctx, func(ctx context.Context) (wire.Result, error) {
			return e.cl.Input(ctx, e.id, wire.Input{Text: text, YieldAfter: yieldOf(0)})
		})
		if signalled || err != nil || rerr != nil {
			return res, signalled, err
		}
		if res.Status != wire.StatusRunning {
			if n, _ := e.stdin.Read(buf[:1]); n > 0 {
				e.stdinLeft = true
			}
			return res, false, nil
		}
		e.add(res)
	}
}

func yieldOf(seconds float64) *float64 { return &seconds }
