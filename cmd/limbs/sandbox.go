package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/endpoint"
	"github.com/limbs-dev/limbs/internal/wire"
)

func init() {
	commands["sandbox"] = command{summary: "create, list, inspect, stop, start and remove sandboxes of `limbs serve`", run: runSandbox}
}

const sandboxUsage = `usage: limbs sandbox VERB [flags] [ID...]

verbs:
  create   create a sandbox and print its id
  ls       list sandboxes
  inspect  print sandboxes as JSON
  stop     stop sandboxes (their state is kept)
  start    start stopped sandboxes
  rm       remove sandboxes and everything made for them
  events   print a sandbox's event log (as limbs events)

Run 'limbs sandbox VERB -h' for a verb's flags.`

func runSandbox(ctx context.Context, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(os.Stderr, sandboxUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	verbs := map[string]func(ctx context.Context, fs *flag.FlagSet, cc *controlConn, args []string) error{
		"create":  sandboxCreate,
		"ls":      sandboxList,
		"inspect": sandboxInspect,
		"stop":    sandboxAction((*client.Sandboxes).Stop),
		"start":   sandboxAction((*client.Sandboxes).Start),
		"rm":      sandboxRemove,
		"events":  sandboxEvents,
	}
	verb, ok := verbs[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "limbs sandbox: unknown verb %q\n\n%s\n", args[0], sandboxUsage)
		return 2
	}
	fs := flag.NewFlagSet("limbs sandbox "+args[0], flag.ContinueOnError)
	cc := controlFlags(fs)
	err := verb(ctx, fs, cc, args[1:])
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		if ue.msg != "" {
			fmt.Fprintf(os.Stderr, "limbs sandbox %s: %s\n", args[0], ue.msg)
		}
		return 2
	default:
		fmt.Fprintf(os.Stderr, "limbs sandbox %s: %s\n", args[0], safeErr(err))
		return 1
	}
}

// usageError is a mistake in the command line (exit code 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// controlConn holds the flags that reach `limbs serve`.
type controlConn struct {
	addr  string
	token string
}

func controlFlags(fs *flag.FlagSet) *controlConn {
	cc := &controlConn{}
	addr := os.Getenv("LIMBS_ADDR")
	if addr == "" {
		addr = defaultControlAddr
	}
	fs.StringVar(&cc.addr, "addr", addr, "address of limbs serve: HOST:PORT or unix:///path/to.sock (env LIMBS_ADDR)")
	fs.StringVar(&cc.token, "token", "", "limbs serve's token (env LIMBS_TOKEN; default: the token file in limbs serve's default state dir)")
	return cc
}

func (cc *controlConn) client() (*client.Sandboxes, error) {
	token := cc.token
	if token == "" {
		token = os.Getenv("LIMBS_TOKEN") // never a flag default: -h prints those
	}
	if token == "" {
		path := tokenFile(defaultServeStateDir())
		var err error
		if token, err = endpoint.ReadTokenFile(path); err != nil {
			return nil, fmt.Errorf("no token: pass --token or set LIMBS_TOKEN (limbs serve prints it when it generates it; reading %s: %v)", path, err)
		}
	}
	c, err := client.New(cc.addr, token, "")
	if err != nil {
		return nil, err
	}
	return c.Sandboxes(), nil
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{}
	}
	return nil
}

// listFlag collects a repeated flag's values.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// envFlag collects repeated --env K=V.
type envFlag map[string]string

func (e envFlag) String() string { return "" }

func (e envFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want NAME=VALUE", v)
	}
	e[k] = val
	return nil
}

func sandboxCreate(ctx context.Context, fs *flag.FlagSet, cc *controlConn, args []string) error {
	var req wire.CreateSandbox
	env := envFlag{}
	fs.StringVar(&req.Image, "image", "", "image (default: the server's default image)")
	fs.StringVar(&req.Provider, "provider", "", "docker or local (default: the server's default provider)")
	fs.StringVar(&req.Name, "name", "", "name, usable instead of the id (default: the id)")
	fs.Float64Var(&req.Cpus, "cpus", 0, "CPU limit (0: the provider's default)")
	fs.Int64Var(&req.MemoryMB, "memory", 0, "memory limit in MiB (0: the provider's default)")
	fs.Int64Var(&req.Pids, "pids", 0, "process limit (0: the provider's default)")
	fs.StringVar((*string)(&req.Network), "network", "", "none (default) or bridge")
	fs.Var(env, "env", "environment variable NAME=VALUE of every shell (repeatable)")
	var secrets listFlag
	fs.Var(&secrets, "secret-env", "NAME of an --env entry whose value is secret: masked in every event, log line and answer of limbs serve (repeatable)")
	fs.StringVar(&req.Workspace, "workspace", "", "docker: volume name or host dir; local: host dir (default: a fresh one)")
	asJSON := fs.Bool("json", false, "print the sandbox as JSON instead of its id")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected arguments %q", fs.Args())}
	}
	if len(env) > 0 {
		req.Env = env
	}
	req.SecretEnv = secrets
	c, err := cc.client()
	if err != nil {
		return err
	}
	stopProgress := progress(fmt.Sprintf("creating sandbox%s", describe(req)))
	sb, err := c.Create(ctx, req)
	stopProgress(err == nil)
	if err != nil {
		return err
	}
	if sb.Message != "" {
		fmt.Fprintf(os.Stderr, "warning: %s\n", safe(sb.Message))
	}
	if *asJSON {
		return printJSON(sb)
	}
	fmt.Println(safe(sb.ID))
	return nil
}

func describe(req wire.CreateSandbox) string {
	var parts []string
	if req.Image != "" {
		parts = append(parts, "image "+req.Image)
	}
	if req.Provider != "" {
		parts = append(parts, "provider "+req.Provider)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// progress shows what is going on while a slow call runs: on a terminal a
// line that counts seconds, elsewhere the line once. The returned function
// ends it.
func progress(what string) func(ok bool) {
	start := time.Now()
	tty := isTerminal(os.Stderr)
	if !tty {
		fmt.Fprintf(os.Stderr, "%s...\n", what)
		return func(bool) {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			fmt.Fprintf(os.Stderr, "\r%s... %ds", what, int(time.Since(start).Seconds()))
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func(ok bool) {
		close(done)
		<-finished
		status := "done"
		if !ok {
			status = "failed"
		}
		fmt.Fprintf(os.Stderr, "\r%s... %s in %.1fs\n", what, status, time.Since(start).Seconds())
	}
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func sandboxList(ctx context.Context, fs *flag.FlagSet, cc *controlConn, args []string) error {
	asJSON := fs.Bool("json", false, "print JSON")
	quiet := fs.Bool("q", false, "print ids only")
	if err := parse(fs, args); err != nil {
		return err
	}
	c, err := cc.client()
	if err != nil {
		return err
	}
	sbs, err := c.List(ctx)
	if err != nil {
		return err
	}
	l := wire.SandboxList{Sandboxes: sbs}
	switch {
	case *asJSON:
		return printJSON(l)
	case *quiet:
		for _, sb := range l.Sandboxes {
			fmt.Println(safe(sb.ID))
		}
		return nil
	}
	return writeTable(os.Stdout, l.Sandboxes, time.Now())
}

func writeTable(w io.Writer, sbs []wire.Sandbox, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tPROVIDER\tIMAGE\tSTATUS\tCREATED\tREASON")
	for _, sb := range sbs {
		reason := sb.Reason
		if reason == "" {
			reason = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s ago\t%s\n", safe(sb.ID), safe(sb.Name), safe(sb.Provider), safe(sb.Image), safe(sb.Status),
			age(now.Sub(sb.CreatedAt)), safe(reason))
	}
	return tw.Flush()
}

// age is a duration the way a listing shows it: its largest unit.
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}

func sandboxInspect(ctx context.Context, fs *flag.FlagSet, cc *controlConn, args []string) error {
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usageError{"name at least one sandbox id or name"}
	}
	c, err := cc.client()
	if err != nil {
		return err
	}
	var out []wire.Sandbox
	for _, id := range fs.Args() {
		sb, err := c.Get(ctx, id)
		if err != nil {
			return err
		}
		out = append(out, sb)
	}
	if len(out) == 1 {
		return printJSON(out[0])
	}
	return printJSON(out)
}

// sandboxAction runs stop or start on every named sandbox.
func sandboxAction(action func(*client.Sandboxes, context.Context, string) (wire.Sandbox, error)) func(ctx context.Context, fs *flag.FlagSet, cc *controlConn, args []string) error {
	return func(ctx context.Context, fs *flag.FlagSet, cc *controlConn, args []string) error {
		return eachSandbox(ctx, fs, cc, args, func(c *client.Sandboxes, id string) error {
			_, err := action(c, ctx, id)
			return err
		})
	}
}

func sandboxRemove(ctx context.Context, fs *flag.FlagSet, cc *controlConn, args []string) error {
	return eachSandbox(ctx, fs, cc, args, func(c *client.Sandboxes, id string) error {
		return c.Remove(ctx, id)
	})
}

// eachSandbox applies f to every named sandbox, printing each one done and
// going on after a failure; the error names every sandbox that failed.
func eachSandbox(ctx context.Context, fs *flag.FlagSet, cc *controlConn, args []string, f func(c *client.Sandboxes, id string) error) error {
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usageError{"name at least one sandbox id or name"}
	}
	c, err := cc.client()
	if err != nil {
		return err
	}
	var failed []string
	for _, id := range fs.Args() {
		if err := f(c, id); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %s\n", safe(id), safeErr(err))
			failed = append(failed, id)
			continue
		}
		fmt.Println(safe(id))
	}
	if len(failed) > 0 {
		return fmt.Errorf("failed for %s", strings.Join(failed, ", "))
	}
	return nil
}

// printJSON prints v indented, with what JSON leaves raw and a terminal
// would act on (DEL, C1 controls, bidi controls) escaped as \uXXXX.
func printJSON(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Println(safeJSON(string(b)))
	return err
}
