package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/charmbracelet/x/term"

	"github.com/limbs-dev/limbs/internal/client"
)

// detachKey ends `limbs shell` without touching the session, like telnet's
// escape: Ctrl-] (0x1d). Every other byte, Ctrl-C included, goes to the
// session.
const detachKey = 0x1d

func init() {
	commands["shell"] = command{
		summary: "attach this terminal to a session (like docker exec -it); detach with Ctrl-]",
		run:     runShell,
	}
}

func runShell(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("limbs shell", flag.ContinueOnError)
	cn := connectFlags(fs)
	from := fs.Int64("from", -1, "replay the session's output from this byte offset (default: start at the live end, no history)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: limbs shell [flags]

Attaches this terminal to a session in raw mode: keys, Ctrl-C included, go to
the session; window size changes follow. Detach with Ctrl-] (the session and
its programs keep running). The session is created if missing.

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
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "limbs shell: unexpected arguments %q; to run a command use limbs exec -- COMMAND\n", fs.Args())
		return exitUsage
	}
	in := os.Stdin.Fd()
	if !term.IsTerminal(in) {
		fmt.Fprintln(os.Stderr, "limbs shell: standard input is not a terminal; use limbs exec -- COMMAND to run commands from scripts")
		return exitUsage
	}
	cl, err := cn.client()
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs shell: %s\n", safeErr(err))
		return 1
	}
	id, err := cn.session(ctx, cl)
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs shell: %s\n", safeErr(err))
		return 1
	}
	fmt.Fprintf(os.Stderr, "attached to session %s (press Enter for a prompt); detach with Ctrl-]\n", safe(cn.sessionName))
	state, err := term.MakeRaw(in)
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs shell: raw mode: %s\n", safeErr(err))
		return 1
	}
	err = attachTerminal(ctx, cl, id, *from, os.Stdin, os.Stdout, func() (int, int, error) { return term.GetSize(os.Stdout.Fd()) })
	_ = term.Restore(in, state)
	switch {
	case errors.Is(err, errDetached):
		fmt.Fprintf(os.Stderr, "\ndetached from session %s (it keeps running)\n", safe(cn.sessionName))
		return 0
	case err == nil:
		fmt.Fprintf(os.Stderr, "\nsession %s ended\n", safe(cn.sessionName))
		return 0
	default:
		fmt.Fprintf(os.Stderr, "\nlimbs shell: %s\n", safeErr(err))
		return 1
	}
}

var errDetached = errors.New("detached")

// attachTerminal relays between this terminal and the session until the
// user detaches (errDetached), the session ends (nil) or something fails.
// A terminal that falls behind the daemon's buffer reconnects from where it
// was, losing nothing.
func attachTerminal(ctx context.Context, cl *client.Client, id string, from int64, in io.Reader, out io.Writer, size func() (int, int, error)) error {
	input := make(chan []byte)
	inErr := make(chan error, 1)
	go readKeys(in, input, inErr)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	for {
		a, err := cl.Attach(ctx, id, from)
		if err != nil {
			return err
		}
		resize(ctx, a, size)
		err = relay(ctx, a, out, input, inErr, winch, size)
		var fb *client.FellBehindError
		if errors.As(err, &fb) {
			a.Close()
			from = fb.From
			continue
		}
		a.Close()
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
}

// relay runs one attachment.
func relay(ctx context.Context, a *client.Attachment, out io.Writer, input <-chan []byte, inErr <-chan error, winch <-chan os.Signal, size func() (int, int, error)) error {
	outErr := make(chan error, 1)
	go func() {
		_, err := io.Copy(out, a)
		if err == nil {
			err = io.EOF
		}
		outErr <- err
	}()
	for {
		select {
		case err := <-outErr:
			return err
		case b := <-input:
			if i := bytes.IndexByte(b, detachKey); i >= 0 {
				if i > 0 {
					_, _ = a.Write(b[:i])
				}
				return errDetached
			}
			if _, err := a.Write(b); err != nil {
				return fmt.Errorf("typing into the session: %w", err)
			}
		case err := <-inErr:
			return fmt.Errorf("reading the terminal: %w", err)
		case <-winch:
			resize(ctx, a, size)
		case <-ctx.Done():
			return errDetached
		}
	}
}

func resize(ctx context.Context, a *client.Attachment, size func() (int, int, error)) {
	if cols, rows, err := size(); err == nil && cols > 0 && rows > 0 {
		_ = a.Resize(ctx, cols, rows)
	}
}

// readKeys forwards what the user types; it lives as long as the process,
// since a read on a terminal cannot be cancelled.
func readKeys(r io.Reader, out chan<- []byte, errc chan<- error) {
	for {
		b := make([]byte, 4096)
		n, err := r.Read(b)
		if n > 0 {
			out <- b[:n]
		}
		if err != nil {
			errc <- err
			return
		}
	}
}
