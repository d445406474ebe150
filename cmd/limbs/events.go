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
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

func init() {
	commands["events"] = command{summary: "print a sandbox's event log (a deleted one's too, within its retention)", run: runEvents}
}

func runEvents(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("limbs events", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: limbs events SANDBOX [--follow] [--type T[,T2|prefix.*]] [--json] [--from N]")
		fs.PrintDefaults()
	}
	cc := controlFlags(fs)
	err := sandboxEvents(ctx, fs, cc, args)
	var ue usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		if ue.msg != "" {
			fmt.Fprintf(os.Stderr, "limbs events: %s\n", ue.msg)
		}
		return 2
	default:
		fmt.Fprintf(os.Stderr, "limbs events: %s\n", safeErr(err))
		return 1
	}
}

// followRetries bounds the reconnections of --follow in a row that bring
// nothing.
const followRetries = 10

// sandboxEvents is `limbs events` and `limbs sandbox events`.
func sandboxEvents(ctx context.Context, fs *flag.FlagSet, cc *controlConn, args []string) error {
	from := fs.Uint64("from", 0, "first sequence number to print")
	types := fs.String("type", "", "types to print: command.finished, a prefix such as command.*, several separated by ','")
	follow := fs.Bool("follow", false, "keep printing events as they come (until interrupted)")
	asJSON := fs.Bool("json", false, "print JSON lines (one wire.Event each)")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{"name one sandbox id or name"}
	}
	c, err := cc.client()
	if err != nil {
		return err
	}
	print := func(ev wire.Event) error {
		if *asJSON {
			b, err := json.Marshal(ev)
			if err != nil {
				return err
			}
			_, err = fmt.Println(safeJSON(string(b)))
			return err
		}
		_, err := fmt.Println(eventLine(ev))
		return err
	}
	q := client.EventsQuery{From: *from, Types: *types}
	if !*follow {
		for range 1_000_000 {
			l, err := c.Events(ctx, fs.Arg(0), q)
			if err != nil {
				return err
			}
			for _, ev := range l.Events {
				if err := print(ev); err != nil {
					return err
				}
			}
			if len(l.Events) == 0 || l.Next <= q.From {
				return nil
			}
			q.From = l.Next
		}
		return nil
	}
	// Followed: a broken stream is followed again from the next event.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	for tries := 0; ; tries++ {
		got := false
		err := c.FollowEvents(ctx, fs.Arg(0), q, func(ev wire.Event) error {
			got = true
			if ev.Seq > 0 {
				q.From = ev.Seq + 1
			}
			return print(ev)
		})
		if ctx.Err() != nil {
			return nil
		}
		if got {
			tries = 0
		}
		if errors.Is(err, wire.ErrNotFound) || errors.Is(err, wire.ErrUnauthorized) || tries >= followRetries {
			return err
		}
		fmt.Fprintf(os.Stderr, "limbs events: %s; following again from %d\n", safeErr(err), q.From)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// parseInterspersed parses flags before and after the one argument
// (limbs events SANDBOX --follow).
func parseInterspersed(fs *flag.FlagSet, args []string) error {
	var pos []string
	for range len(args) + 1 {
		if err := parse(fs, args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	return fs.Parse(append([]string{"--"}, pos...))
}

// eventLine is an event as one human line, every part escaped.
func eventLine(ev wire.Event) string {
	var b strings.Builder
	if ev.Seq > 0 {
		fmt.Fprintf(&b, "%d ", ev.Seq)
	}
	b.WriteString(ev.Time.Local().Format("2006-01-02 15:04:05.000"))
	b.WriteString(" " + safe(string(ev.Type)))
	if ev.Session != "" {
		b.WriteString(" " + safe(ev.Session))
	}
	switch {
	case strings.HasPrefix(string(ev.Type), "sandbox."):
		var d wire.SandboxData
		_ = json.Unmarshal(ev.Data, &d)
		if d.Reason != "" {
			b.WriteString(" (" + safe(d.Reason) + ")")
		}
		if d.Message != "" {
			b.WriteString(": " + safe(d.Message))
		}
	case ev.Type == wire.EventAPICall:
		var d wire.APICallData
		_ = json.Unmarshal(ev.Data, &d)
		fmt.Fprintf(&b, " %s %s %d %dms %s", safe(d.Method), safe(d.Path), d.Status, d.DurationMs, safe(d.Caller))
	case ev.Type == wire.EventCommandStarted:
		var d wire.CommandStartedData
		_ = json.Unmarshal(ev.Data, &d)
		b.WriteString(" " + safe(d.Text))
	case ev.Type == wire.EventCommandFinished:
		var d wire.CommandFinishedData
		_ = json.Unmarshal(ev.Data, &d)
		fmt.Fprintf(&b, " %s", safe(d.Status))
		if d.ExitCode != nil {
			fmt.Fprintf(&b, " exit %d", *d.ExitCode)
		}
		fmt.Fprintf(&b, " %dms", d.DurationMs)
		if d.Reason != "" {
			b.WriteString(" (" + safe(d.Reason) + ")")
		}
	case ev.Type == wire.EventOutput:
		var d wire.OutputData
		_ = json.Unmarshal(ev.Data, &d)
		fmt.Fprintf(&b, " %d bytes at %d: %s", d.Size, d.Offset, safe(string(d.Bytes)))
	case ev.Type == wire.EventGap:
		var d wire.GapData
		_ = json.Unmarshal(ev.Data, &d)
		fmt.Fprintf(&b, " events %d to %d are not kept: %s", d.From, d.To-1, safe(d.Reason))
	case len(ev.Data) > 0:
		b.WriteString(" " + safe(string(ev.Data)))
	}
	return b.String()
}
