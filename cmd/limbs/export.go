package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/charmbracelet/x/term"

	"github.com/limbs-dev/limbs/internal/atif"
	"github.com/limbs-dev/limbs/internal/cast"
)

func init() {
	commands["export"] = command{summary: "write a session of a sandbox as an asciicast recording or its events as JSON lines", run: runExport}
	commands["replay"] = command{summary: "play a session of a sandbox back in this terminal with its timing", run: runReplay}
}

// parseWithOne parses flags that may come before and after the one
// positional argument (limbs export SANDBOX --session S), and returns it.
func parseWithOne(fs *flag.FlagSet, args []string, what string) (string, error) {
	if err := parse(fs, args); err != nil {
		return "", err
	}
	if fs.NArg() == 0 {
		return "", usageError{"name " + what}
	}
	arg := fs.Arg(0)
	if err := parse(fs, fs.Args()[1:]); err != nil {
		return "", err
	}
	if fs.NArg() > 0 {
		return "", usageError{fmt.Sprintf("unexpected arguments %q: name only %s", fs.Args(), what)}
	}
	return arg, nil
}

// exitCode prints err as the verb's error and returns the exit code.
func exitCode(verb string, err error) int {
	var ue usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		if ue.msg != "" {
			fmt.Fprintf(os.Stderr, "limbs %s: %s\n", verb, ue.msg)
		}
		return exitUsage
	default:
		fmt.Fprintf(os.Stderr, "limbs %s: %s\n", verb, safeErr(err))
		return 1
	}
}

func runExport(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("limbs export", flag.ContinueOnError)
	cc := controlFlags(fs)
	var o cast.Options
	fs.StringVar(&o.Session, "session", "", "session id or name (default: the sandbox's first session; with --format jsonl: all events)")
	format := fs.String("format", "asciicast", "asciicast, jsonl (the events as limbs serve logged them, output bytes included) or atif (the run of limbs agent as an ATIF v1.7 trajectory)")
	run := fs.String("run", "", "atif: the run of limbs agent (its session name, agent-...; default: the last run in the log)")
	version := fs.Int("asciicast-version", 2, "2 (asciinema 2, asciinema-player) or 3 (asciinema 3)")
	out := fs.String("o", "", "write to this file (default: standard output)")
	fs.BoolVar(&o.Input, "input", false, "asciicast: add what was typed as \"i\" events (masked input stays masked)")
	fs.BoolVar(&o.Markers, "markers", false, "asciicast: add a marker (\"m\") at each command's start, with its text")
	title := fs.String("title", "", "asciicast: the header's title (default: limbs SANDBOX SESSION)")
	idle := fs.Duration("idle-limit", 0, "asciicast: the header's idle_time_limit, such as 2s: players shorten longer pauses")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: limbs export SANDBOX [flags]

Writes a session of a sandbox, from limbs serve's event log, as an asciicast
recording (asciinema play FILE, asciinema-player) or its events as JSON lines.
The output bytes are the session's own; asciicast holds text, so an invalid
UTF-8 byte is written as U+FFFD there (the JSON lines keep every byte).

flags:
`)
		fs.PrintDefaults()
	}
	sandbox, err := parseWithOne(fs, args, "the sandbox (its id or name)")
	if err == nil && *format != "asciicast" && *format != "jsonl" && *format != "atif" {
		err = usageError{fmt.Sprintf("--format %q: use asciicast, jsonl or atif", *format)}
	}
	if err == nil && *version != 2 && *version != 3 {
		err = usageError{fmt.Sprintf("--asciicast-version %d: use 2 or 3", *version)}
	}
	if err != nil {
		return exitCode("export", err)
	}
	if *format == "atif" {
		return exitCode("export", exportATIF(ctx, cc, sandbox, *run, *out))
	}
	return exitCode("export", export(ctx, cc, sandbox, o, *format, *version, *out, cast.WriteOptions{Title: *title, IdleLimit: *idle}))
}

func export(ctx context.Context, cc *controlConn, sandbox string, o cast.Options, format string, version int, out string, wo cast.WriteOptions) error {
	c, err := cc.client()
	if err != nil {
		return err
	}
	events, err := fetchEvents(ctx, c.Client(), sandbox, 0)
	if err != nil {
		return err
	}
	write := func(w io.Writer) error { return cast.WriteEvents(w, events) }
	if format == "asciicast" || o.Session != "" {
		rec, err := cast.Build(events, o)
		if err != nil {
			return fmt.Errorf("sandbox %s: %w", sandbox, err)
		}
		warnMissing(rec)
		switch {
		case format == "jsonl":
			write = rec.WriteJSONL
		case version == 3:
			write = func(w io.Writer) error { return rec.WriteV3(w, wo) }
		default:
			write = func(w io.Writer) error { return rec.WriteV2(w, wo) }
		}
	}
	if out == "" {
		return write(os.Stdout)
	}
	return writeFileAtomic(out, write)
}

// warnMissing says when the log did not hold all of a session's output.
func warnMissing(rec *cast.Recording) {
	if rec.Missing > 0 {
		fmt.Fprintf(os.Stderr, "limbs: %d bytes of session %s's output are not in the event log (lost to its retention, or logged without their bytes); the recording leaves them out\n", rec.Missing, safe(rec.Session))
	}
}

// writeFileAtomic writes path through a temporary file in its directory,
// so that a failed export leaves no half-written file behind.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(f.Name()) // after the rename, removes nothing
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return os.Rename(f.Name(), path)
}

// Keys that stop a replay: q and Ctrl-C (raw mode delivers it as a key).
const replayQuit, replayCtrlC = 'q', 0x03

func runReplay(ctx context.Context, args []string) int {
	return replay(ctx, args, os.Stdin, os.Stdout)
}

func replay(ctx context.Context, args []string, stdin, stdout *os.File) int {
	fs := flag.NewFlagSet("limbs replay", flag.ContinueOnError)
	cc := controlFlags(fs)
	session := fs.String("session", "", "session id or name (default: the sandbox's first session)")
	var po cast.PlayOptions
	fs.Float64Var(&po.Speed, "speed", 1, "play this many times faster (0.5: slower)")
	fs.DurationVar(&po.MaxIdle, "max-idle", 0, "cap every pause at this, such as 2s (default: pauses as recorded)")
	noHint := fs.Bool("no-size-hint", false, "do not ask the terminal to take the session's size")
	af := addAgentReplayFlags(fs) // agentreplay.go
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: limbs replay SANDBOX [flags]
       limbs replay SANDBOX --agent [--run agent-...] [--step | --all]
       limbs replay --file RUN.jsonl|RUN.atif.json [--step | --all]

Plays a session of a sandbox, from limbs serve's event log, back in this
terminal with its real timing. q or Ctrl-C stops it.

With --agent, shows a run of limbs agent step by step instead: the model's
text, each tool call with its arguments, each result (the command, its exit
code, the output the model saw), the tokens and how it ended, with its
timing on a terminal (space or n: the rest of the step now; --step: stop
after each step), all at once into a pipe or with --all.

flags:
`)
		fs.PrintDefaults()
	}
	sandbox, err := parseReplayArgs(fs, args, af)
	if err == nil && (po.Speed <= 0 || po.Speed > 1e6) {
		err = usageError{fmt.Sprintf("--speed %v: give a factor above 0, such as 4 or 0.5", po.Speed)}
	}
	if err == nil && po.MaxIdle < 0 {
		err = usageError{"--max-idle: give a duration such as 2s"}
	}
	if err == nil && af.on() && *session != "" {
		err = usageError{"--session is a terminal's replay; --agent replays the run of limbs agent (--run picks one)"}
	}
	if err != nil {
		return exitCode("replay", err)
	}
	if af.on() {
		return exitCode("replay", agentReplay(ctx, cc, sandbox, af, po, stdin, stdout))
	}
	c, err := cc.client()
	if err != nil {
		return exitCode("replay", err)
	}
	events, err := fetchEvents(ctx, c.Client(), sandbox, 0)
	if err != nil {
		return exitCode("replay", err)
	}
	rec, err := cast.Build(events, cast.Options{Session: *session})
	if err != nil {
		return exitCode("replay", fmt.Errorf("sandbox %s: %w", sandbox, err))
	}
	warnMissing(rec)
	if len(atif.Runs(events)) > 0 {
		fmt.Fprintf(os.Stderr, "limbs replay: this sandbox's log holds runs of limbs agent: 'limbs replay %s --agent' shows the last one step by step\n", safe(sandbox))
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	po.SizeHint = !*noHint && term.IsTerminal(stdout.Fd())
	if term.IsTerminal(stdin.Fd()) {
		// Raw, so that q stops the replay without Enter and Ctrl-C comes
		// as a key; keys are read, never sent anywhere.
		state, err := term.MakeRaw(stdin.Fd())
		if err != nil {
			return exitCode("replay", fmt.Errorf("raw mode: %w", err))
		}
		defer term.Restore(stdin.Fd(), state)
		go func() {
			b := make([]byte, 64)
			for {
				n, err := stdin.Read(b)
				for _, k := range b[:n] {
					if k == replayQuit || k == replayCtrlC {
						cancel()
						return
					}
				}
				if err != nil || ctx.Err() != nil {
					return
				}
			}
		}()
	}
	err = cast.Play(ctx, stdout, rec, po)
	if errors.Is(err, context.Canceled) {
		// Stopped by a key or a signal: leave the terminal's colours and
		// cursor as the user had them, on a fresh line.
		if term.IsTerminal(stdout.Fd()) {
			_, _ = io.WriteString(stdout, "\x1b[0m\x1b[?25h\r\n")
		}
		return 0
	}
	return exitCode("replay", err)
}
