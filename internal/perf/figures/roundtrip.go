package figures

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/perf"
	"github.com/limbs-dev/limbs/internal/wire"
)

// roundTripCommands are the commands timed, each with the output it must
// give back.
var roundTripCommands = []struct{ key, command, want string }{
	{"true", "true", ""},
	{"echo-hi", "echo hi", "hi"},
}

// roundTrip: each command through limbsd's API, through limbs serve into
// a Docker sandbox and through limbs serve's MCP server, next to docker
// exec, tmux polled every 0.5 s, tmux driven as OpenHands' loop drives
// it, a wait for 0.5 s of silence, and the floor, a raw PTY ping-pong.
func (e *env) roundTrip(ctx context.Context) error {
	const g = "roundtrip"
	floorKey := "roundtrip/raw-pty"
	e.progress("%s: raw PTY ping-pong (%d rounds)", g, e.o.Rounds)
	floor, err := perf.PingPong(ctx, e.o.Rounds)
	if err != nil {
		return err
	}
	e.rep.Add(ms(floorKey, g, "raw PTY ping-pong through cat (the floor)", floor, ""))

	l, err := e.daemon(ctx)
	if err != nil {
		return err
	}
	sid, err := l.Session(ctx, "bench")
	if err != nil {
		return err
	}
	var sb *perf.Sandbox
	var mcp *sdk.ClientSession
	dockerErr := e.dockerOK(ctx)
	if dockerErr == nil {
		if sb, err = e.dockerSandbox(ctx); err != nil {
			return err
		}
		if mcp, err = e.mcpSession(ctx, sb.ID); err != nil {
			return err
		}
		defer mcp.Close()
	} else {
		e.rep.Note("roundtrip: no Docker figures: %v", dockerErr)
	}
	for _, c := range roundTripCommands {
		q := "`" + c.command + "`"
		e.progress("%s: %s through limbsd's API (%d rounds)", g, q, e.o.Rounds)
		d, err := execRounds(ctx, l.Client, sid, c.command, c.want, e.o.Rounds)
		if err != nil {
			return err
		}
		e.rep.Add(ms("roundtrip/limbsd-api/"+c.key, g, q+" via limbsd's API, Unix socket", d, floorKey))
		if sb == nil {
			continue
		}
		serveKey := "roundtrip/serve-docker/" + c.key
		e.progress("%s: %s through limbs serve into Docker (%d rounds)", g, q, e.o.Rounds)
		if d, err = execRounds(ctx, sb.Client, "main", c.command, c.want, e.o.Rounds); err != nil {
			return err
		}
		e.rep.Add(ms(serveKey, g, q+" via limbs serve into Docker", d, floorKey))
		e.progress("%s: %s through limbs serve's MCP server (%d rounds)", g, q, e.o.MCPRounds)
		if d, err = mcpRounds(ctx, mcp, c.command, c.want, e.o.MCPRounds); err != nil {
			return err
		}
		e.rep.Add(ms("roundtrip/mcp/"+c.key, g, q+" via MCP (shell_run, official Go SDK client)", d, floorKey))
		e.progress("%s: %s with docker exec (%d rounds)", g, q, e.o.ExecRounds)
		if d, err = perf.DockerExec(ctx, sb.Container, c.command, e.o.ExecRounds); err != nil {
			return err
		}
		e.rep.Add(ms("roundtrip/docker-exec/"+c.key, g, q+" docker exec bash -c", d, serveKey))
		e.progress("%s: %s in tmux polled every 0.5 s (%d rounds)", g, q, e.o.PollRounds)
		if d, err = perf.TmuxPoll(ctx, c.command, e.o.PollRounds, 500*time.Millisecond); err != nil {
			if ctx.Err() != nil {
				return err
			}
			e.rep.Note("roundtrip: %s with tmux not measured: %v", q, err)
		} else {
			e.rep.Add(ms("roundtrip/tmux/"+c.key, g, q+" tmux send-keys, capture-pane every 0.5 s", d, serveKey))
		}
		e.progress("%s: %s in tmux as OpenHands' loop drives it (%d rounds)", g, q, e.o.PollRounds)
		if d, err = perf.TmuxOpenHands(ctx, c.command, e.o.PollRounds, 500*time.Millisecond, 100*time.Millisecond); err != nil {
			if ctx.Err() != nil {
				return err
			}
			e.rep.Note("roundtrip: %s with OpenHands' tmux loop not measured: %v", q, err)
		} else {
			e.rep.Add(ms("roundtrip/tmux-openhands/"+c.key, g, q+" tmux as OpenHands' loop: read at once, then every 0.5 s, clear (0.1 s)", d, serveKey))
		}
		e.progress("%s: %s until 0.5 s of silence (%d rounds)", g, q, e.o.PollRounds)
		if d, err = perf.Silence(ctx, c.command, e.o.PollRounds, 500*time.Millisecond); err != nil {
			return err
		}
		e.rep.Add(ms("roundtrip/silence/"+c.key, g, q+" bash on a PTY, until 0.5 s of silence", d, serveKey))
		e.speedTarget(serveKey, "roundtrip/docker-exec/"+c.key, q+": limbs serve into Docker vs docker exec", 100)
		e.speedTarget(serveKey, "roundtrip/tmux/"+c.key, q+": limbs serve into Docker vs tmux polling", 600)
	}
	return nil
}

// speedTarget records "fast is at least want times faster than slow".
func (e *env) speedTarget(fast, slow, name string, want float64) {
	f, ok1 := e.rep.Row(fast)
	s, ok2 := e.rep.Row(slow)
	if !ok1 || !ok2 || f.P50 == 0 {
		return
	}
	x := s.P50 / f.P50
	e.rep.Target(name, fmt.Sprintf(">= %.0fx faster (p50)", want), fmt.Sprintf("%.0fx (%s vs %s ms)", x, perf.Num(f.P50), perf.Num(s.P50)), x >= want)
}

// execRounds runs command rounds times on a session (after 10 untimed),
// each checked: exited 0 with output want.
func execRounds(ctx context.Context, c *client.Client, session, command, want string, rounds int) ([]time.Duration, error) {
	zero := 0.0
	one := func() (time.Duration, error) {
		t0 := time.Now()
		r, err := c.Exec(ctx, session, wire.Exec{Command: command, YieldAfter: &zero})
		d := time.Since(t0)
		if err != nil {
			return d, fmt.Errorf("exec %q: %w", command, err)
		}
		if r.Status != wire.StatusExited || r.ExitCode == nil || *r.ExitCode != 0 || strings.TrimSpace(r.Output) != want {
			return d, fmt.Errorf("exec %q: status %s, output %q; want exit 0 and %q", command, r.Status, r.Output, want)
		}
		return d, nil
	}
	return timeRounds(ctx, 10, rounds, one)
}

// bearer adds the token to each request of the MCP client.
type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

// mcpSession connects the official MCP Go SDK's client to limbs serve's
// MCP endpoint for one sandbox (streamable HTTP on loopback).
func (e *env) mcpSession(ctx context.Context, sandbox string) (*sdk.ClientSession, error) {
	tr := &sdk.StreamableClientTransport{
		Endpoint:   "http://" + e.serve.Addr + "/mcp?sandbox=" + sandbox,
		HTTPClient: &http.Client{Transport: bearer{e.serve.Token, http.DefaultTransport}},
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "limbs-bench", Version: "0"}, nil).Connect(cctx, tr, nil)
	if err != nil {
		return nil, fmt.Errorf("connecting to limbs serve's MCP endpoint: %w", err)
	}
	return cs, nil
}

// mcpRounds calls shell_run rounds times (after 5 untimed), each result
// checked: no tool error, exit code 0, the output wanted.
func mcpRounds(ctx context.Context, cs *sdk.ClientSession, command, want string, rounds int) ([]time.Duration, error) {
	one := func() (time.Duration, error) {
		t0 := time.Now()
		r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "shell_run", Arguments: map[string]any{"command": command}})
		d := time.Since(t0)
		if err != nil {
			return d, fmt.Errorf("MCP shell_run %q: %w", command, err)
		}
		var text strings.Builder
		for _, c := range r.Content {
			if t, ok := c.(*sdk.TextContent); ok {
				text.WriteString(t.Text)
			}
		}
		if r.IsError || !strings.Contains(text.String(), "exit code 0") || !strings.HasPrefix(text.String(), want) {
			return d, fmt.Errorf("MCP shell_run %q answered %q; want exit code 0 and %q", command, text.String(), want)
		}
		return d, nil
	}
	return timeRounds(ctx, 5, rounds, one)
}

// timeRounds runs one warm times untimed, then rounds times, and returns
// the durations one measured; it stops at the first error or when ctx
// ends, returning what it has.
func timeRounds(ctx context.Context, warm, rounds int, one func() (time.Duration, error)) ([]time.Duration, error) {
	for range warm {
		if _, err := one(); err != nil {
			return nil, err
		}
	}
	out := make([]time.Duration, 0, rounds)
	for range rounds {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		d, err := one()
		if err != nil {
			return out, err
		}
		out = append(out, d)
	}
	return out, nil
}
