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

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Exit codes of `limbs exec` besides the command's own.
const (
	exitUsage       = 2
	exitTimeout     = 124 // as timeout(1)
	exitLimbsFailed = 125 // as docker run: limbs itself failed, not the command
	exitInterrupted = 130
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
	asJSON := fs.Bool("json", false, "print one Result JSON object (output joined from every chunk) instead of the output")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: limbs exec [flags] -- COMMAND...

Runs COMMAND (its words joined with spaces, as shell text) in a persistent
session: cd, variables and functions stay for the next exec. Prints the
output as it arrives and exits with the command's exit code; 124 when
--timeout stopped it, 130 when interrupted (Ctrl-C here interrupts it),
125 when limbs itself failed.

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
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	defer signal.Stop(sig)
	e := &execRun{cl: cl, id: id, name: cn.sessionName, sig: sig, out: os.Stdout, stream: !*asJSON}
	res, err := e.run(ctx, wire.Exec{Command: strings.Join(fs.Args(), " "), Timeout: *timeout})
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs exec: %s\n", safeErr(err))
		return exitLimbsFailed
	}
	if note := logNote(res); note != "" {
		fmt.Fprintf(os.Stderr, "\nlimbs exec: %s\n", note)
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return exitLimbsFailed
		}
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
	name   string
	sig    <-chan os.Signal
	out    io.Writer
	stream bool // print each chunk as it arrives

	total    wire.Result // every chunk joined
	chunks   int
	notified bool // told the user the command waits for input
}

// run executes req and keeps waiting while it runs. Ctrl-C (sig) abandons
// the call in flight, which leaves the command running, and interrupts it.
func (e *execRun) run(ctx context.Context, req wire.Exec) (wire.Result, error) {
	req.YieldAfter = yieldOf(execChunk)
	res, signalled, err := e.call(ctx, func(ctx context.Context) (wire.Result, error) {
		return e.cl.Exec(ctx, e.id, req)
	})
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
			fmt.Fprintf(os.Stderr, "\nlimbs exec: the command is waiting for input; answer it with 'limbs shell --session %s' or press Ctrl-C to interrupt it\n", safe(e.name))
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
	case <-e.sig:
		cancel()
		<-done
		return wire.Result{}, true, nil
	}
}

// interrupt stops the command; when it ended on its own meanwhile, the
// output it left is fetched with one wait.
func (e *execRun) interrupt(ctx context.Context) (wire.Result, error) {
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

// add prints a chunk and folds it into the joined result.
func (e *execRun) add(r wire.Result) {
	if e.stream && r.Output != "" {
		io.WriteString(e.out, r.Output)
	}
	out := e.total.Output + r.Output
	start, truncated := r.OffsetStart, r.Truncated
	if e.chunks > 0 {
		start = e.total.OffsetStart
		truncated = truncated || e.total.Truncated
	}
	e.total = r
	e.total.Output, e.total.OffsetStart, e.total.Truncated = out, start, truncated
	e.chunks++
}

func yieldOf(seconds float64) *float64 { return &seconds }
