package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

// The verbs that follow a command started by limbs exec (or by an agent):
// what the busy error and the waiting-for-input note tell users to run.
func init() {
	commands["input"] = command{summary: "type text or keys into a session's running command and print what follows", run: runInput}
	commands["interrupt"] = command{summary: "interrupt a session's running command (Ctrl-C, then stronger) and print its end", run: runInterrupt}
	commands["wait"] = command{summary: "follow a session's running command to its end, print its output, exit with its code", run: runWait}
	commands["screen"] = command{summary: "print what a terminal showing the session displays now", run: runScreen}
}

// verbFlags parses the flags every follow-up verb shares.
func verbFlags(name, usage string, args []string, extra func(fs *flag.FlagSet)) (*conn, *bool, []string, int) {
	fs := flag.NewFlagSet("limbs "+name, flag.ContinueOnError)
	cn := connectFlags(fs)
	asJSON := fs.Bool("json", false, "print the Result (Screen for limbs screen) as JSON instead of the text")
	if extra != nil {
		extra(fs)
	}
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage+"\nflags:\n")
		fs.PrintDefaults()
	}
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, nil, nil, 0
		}
		return nil, nil, nil, exitUsage
	}
	return cn, asJSON, rest, -1
}

// open returns the client and the id of an existing session (these verbs
// never create one).
func (c *conn) open(ctx context.Context) (*client.Client, string, error) {
	cl, err := c.client()
	if err != nil {
		return nil, "", err
	}
	name := c.sessionName
	if name == "" {
		name = defaultSession
	}
	s, err := cl.GetSession(ctx, name)
	if err != nil {
		return nil, "", err
	}
	return cl, s.ID, nil
}

// noCommand explains wire.ErrNoCommand in terms of the CLI.
func noCommand(verb string, cn *conn) string {
	return fmt.Sprintf("limbs %s: nothing is running in session %s; start a command with '%s -- COMMAND'", verb, safe(cn.sessionName), cn.hint("exec"))
}

func runInput(ctx context.Context, args []string) int {
	var keys string
	var noEnter bool
	cn, asJSON, rest, code := verbFlags("input", `usage: limbs input [flags] [TEXT...]

Types TEXT (its words joined with spaces) and Enter into the command
running in the session, e.g. the answer to a prompt, then follows the
command like limbs wait. --keys sends named keys instead or after
(Up, Down, Tab, Escape, C-c, C-d, ...: see docs/api.md). Typing into a
session with no running command is refused: it would reach the shell.
`, args, func(fs *flag.FlagSet) {
		fs.StringVar(&keys, "keys", "", "comma-separated key names to send after TEXT, e.g. Down,Enter or C-d")
		fs.BoolVar(&noEnter, "no-enter", false, "do not press Enter after TEXT")
	})
	if code >= 0 {
		return code
	}
	req := wire.Input{Text: strings.Join(rest, " ")}
	if req.Text != "" && !noEnter {
		req.Text += "\n"
	}
	if keys != "" {
		req.Keys = strings.Split(keys, ",")
	}
	if req.Text == "" && len(req.Keys) == 0 {
		fmt.Fprintln(os.Stderr, "limbs input: nothing to type; usage: limbs input [flags] TEXT... or --keys KEYS")
		return exitUsage
	}
	return follow(ctx, "input", cn, *asJSON, func(ctx context.Context, cl *client.Client, id string) (wire.Result, error) {
		// Only into a running command: text for a prompt typed into an
		// idle shell would run as a command.
		if st, err := cl.GetSession(ctx, id); err != nil {
			return wire.Result{}, err
		} else if st.State != wire.StateRunning {
			return wire.Result{}, wire.ErrNoCommand
		}
		req.YieldAfter = yieldOf(execChunk)
		return cl.Input(ctx, id, req)
	})
}

func runWait(ctx context.Context, args []string) int {
	cn, asJSON, rest, code := verbFlags("wait", `usage: limbs wait [flags]

Follows the command running in the session (started by limbs exec, an
agent, or limbs shell): prints its output from where the last result
left off and exits with its code, as limbs exec does; Ctrl-C or SIGTERM
interrupts it.
`, args, nil)
	if code >= 0 {
		return code
	}
	if len(rest) > 0 {
		fmt.Fprintf(os.Stderr, "limbs wait: unexpected arguments %q; usage: limbs wait [flags]\n", rest)
		return exitUsage
	}
	return follow(ctx, "wait", cn, *asJSON, func(ctx context.Context, cl *client.Client, id string) (wire.Result, error) {
		return cl.Wait(ctx, id, wire.Wait{YieldAfter: yieldOf(execChunk)})
	})
}

func runInterrupt(ctx context.Context, args []string) int {
	cn, asJSON, rest, code := verbFlags("interrupt", `usage: limbs interrupt [flags]

Interrupts the command running in the session: SIGINT to its foreground
job, then SIGTERM and SIGKILL while it keeps running. Prints the output it
left and exits as limbs exec would (130: interrupted).
`, args, nil)
	if code >= 0 {
		return code
	}
	if len(rest) > 0 {
		fmt.Fprintf(os.Stderr, "limbs interrupt: unexpected arguments %q; usage: limbs interrupt [flags]\n", rest)
		return exitUsage
	}
	return follow(ctx, "interrupt", cn, *asJSON, func(ctx context.Context, cl *client.Client, id string) (wire.Result, error) {
		return cl.Interrupt(ctx, id, wire.Interrupt{})
	})
}

// follow runs first, then follows the command to its end as limbs exec
// does, and exits with its code.
func follow(ctx context.Context, verb string, cn *conn, asJSON bool, first func(context.Context, *client.Client, string) (wire.Result, error)) int {
	ctx = context.WithoutCancel(ctx)
	cl, id, err := cn.open(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs %s: %s\n", verb, safeErr(err))
		return exitLimbsFailed
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	e := &execRun{cl: cl, id: id, cn: cn, sig: sig, out: os.Stdout, stream: !asJSON}
	res, err := e.follow(ctx, func(ctx context.Context) (wire.Result, error) { return first(ctx, cl, id) })
	if errors.Is(err, wire.ErrNoCommand) {
		fmt.Fprintln(os.Stderr, noCommand(verb, cn))
		return 1
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs %s: %s\n", verb, safeErr(err))
		return exitLimbsFailed
	}
	return e.finish(res, asJSON)
}

func runScreen(ctx context.Context, args []string) int {
	cn, asJSON, rest, code := verbFlags("screen", `usage: limbs screen [flags]

Prints the session's screen as a terminal showing it displays it now:
the prompt, a full-screen program (vim, less, top), a question waiting
for an answer. Trailing blank lines are left out.
`, args, nil)
	if code >= 0 {
		return code
	}
	if len(rest) > 0 {
		fmt.Fprintf(os.Stderr, "limbs screen: unexpected arguments %q; usage: limbs screen [flags]\n", rest)
		return exitUsage
	}
	cl, id, err := cn.open(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs screen: %s\n", safeErr(err))
		return exitLimbsFailed
	}
	sc, err := cl.Screen(ctx, id)
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs screen: %s\n", safeErr(err))
		return exitLimbsFailed
	}
	if *asJSON {
		b, _ := json.MarshalIndent(sc, "", "  ")
		fmt.Println(safeJSON(string(b)))
		return 0
	}
	lines := sc.Lines
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	for _, l := range lines {
		fmt.Println(safe(strings.TrimRight(l, " ")))
	}
	return 0
}
