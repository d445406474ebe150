package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/limbs-dev/limbs/internal/agent"
	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/control"
	"github.com/limbs-dev/limbs/internal/mcp"
	"github.com/limbs-dev/limbs/internal/tool"
	"github.com/limbs-dev/limbs/internal/wire"
)

func init() {
	commands["checkpoint"] = command{summary: "checkpoint a sandbox's files and sessions (ls and rm list and delete checkpoints)", run: runCheckpoint}
}

func runCheckpoint(ctx context.Context, args []string) int {
	return exitCode("checkpoint", checkpointVerb(ctx, args))
}

func checkpointVerb(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("limbs checkpoint", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: limbs checkpoint SANDBOX [--name N] [--path /workspace]... [--ttl D]
       limbs checkpoint ls SANDBOX
       limbs checkpoint rm SANDBOX CHECKPOINT

Records the sandbox's files under --path (default its workspace) with
their modes, symlinks and empty directories, and each session's cwd and
exported environment (never running programs), in limbs serve's state
dir, out of the sandbox's reach. Only what changed since the previous
checkpoint is sent and stored. See docs/checkpoints.md.

flags:
`)
		fs.PrintDefaults()
	}
	cc := controlFlags(fs)
	name := fs.String("name", "", "the checkpoint's name")
	var paths listFlag
	fs.Var(&paths, "path", "an absolute path to record (repeatable; default: the workspace)")
	ttl := fs.Duration("ttl", 0, "keep it this long (default: limbs serve's --checkpoint-ttl)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	a := fs.Args()
	if len(a) == 0 {
		return usageError{"name a sandbox; usage: limbs checkpoint SANDBOX"}
	}
	sbs, err := cc.client()
	if err != nil {
		return err
	}
	switch {
	case a[0] == "ls" && len(a) == 2:
		list, err := sbs.Checkpoints(ctx, a[1])
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(wire.CheckpointList{Checkpoints: list})
		}
		for _, cp := range list {
			fmt.Println(checkpointLine(cp))
		}
		return nil
	case a[0] == "rm" && len(a) == 3:
		return sbs.DeleteCheckpoint(ctx, a[1], a[2])
	case len(a) == 1:
		cp, err := sbs.Checkpoint(ctx, a[0], wire.CreateCheckpoint{Name: *name, Paths: paths, TTL: ttl.Seconds()})
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(cp)
		}
		fmt.Println(checkpointLine(cp))
		return nil
	}
	return usageError{"usage: limbs checkpoint SANDBOX | ls SANDBOX | rm SANDBOX CHECKPOINT"}
}

func checkpointLine(cp wire.Checkpoint) string {
	return fmt.Sprintf("%s\t%s\t%s\t%d files\t%s\tfrozen %d ms\t%s", cp.ID, safe(cp.Name), cp.CreatedAt.Local().Format(time.DateTime), cp.Files, humanBytes(cp.Size), cp.FrozenMS, cp.Sandbox)
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// newestCheckpoint is the id of a sandbox's newest checkpoint.
func newestCheckpoint(ctx context.Context, sbs *client.Sandboxes, sb string) (string, error) {
	list, err := sbs.Checkpoints(ctx, sb)
	if err != nil {
		return "", err
	}
	if len(list) == 0 {
		return "", fmt.Errorf("sandbox %s has no checkpoint: take one with limbs checkpoint %s", safe(sb), safe(sb))
	}
	return list[len(list)-1].ID, nil
}

// withCheckpoints adds the checkpoint tools (checkpoint, rollback) of
// sandbox to every MCP session's tools: served whenever the sandbox is
// one of limbs serve's.
func withCheckpoints(ts mcp.ToolSet, c tool.Checkpointer, sandbox string) mcp.ToolSet {
	return func(sh *tool.Shell, files tool.Files) ([]tool.Spec, error) {
		specs, err := ts(sh, files)
		if err != nil {
			return nil, err
		}
		return append(specs, tool.CheckpointTools(c, sandbox)...), nil
	}
}

// controlOf is the control plane's client a --sandbox connection goes
// through (limbs serve's address and token).
func controlOf(cn *conn) (*client.Sandboxes, error) {
	addr := cn.addr
	if addr == "" {
		addr = defaultControlAddr
	}
	cc := &controlConn{addr: addr, token: cn.token}
	return cc.client()
}

// stepCheckpointer is limbs agent --checkpoint-each-step: a checkpoint
// named step-N before the tool calls of each step run, so that any step
// can be rolled back to (limbs rollback SANDBOX CP).
type stepCheckpointer struct {
	agent.Nop
	ctx     context.Context
	sbs     *client.Sandboxes
	sandbox string
	w       io.Writer
}

func (s *stepCheckpointer) Assistant(step int, _ string, calls []agent.ToolCall) {
	if len(calls) == 0 {
		return
	}
	cp, err := s.sbs.Checkpoint(s.ctx, s.sandbox, wire.CreateCheckpoint{Name: fmt.Sprintf("step-%d", step)})
	if err != nil {
		fmt.Fprintf(s.w, "limbs agent: checkpoint before step %d: %s\n", step, safeErr(err))
		return
	}
	fmt.Fprintf(s.w, "limbs agent: checkpoint %s before step %d (%d files, frozen %d ms)\n", cp.ID, step, cp.Files, cp.FrozenMS)
}

// agentCheckpoints adds the checkpoint tools to specs when the agent works
// in a sandbox of limbs serve, and with each (--checkpoint-each-step) the
// observer that checkpoints every step.
func agentCheckpoints(ctx context.Context, cn *conn, each bool, specs []tool.Spec, obs agent.Observer) ([]tool.Spec, agent.Observer, error) {
	if cn.sandbox == "" {
		if each {
			return nil, nil, fmt.Errorf("--checkpoint-each-step needs a sandbox of limbs serve (--sandbox or --image), not one limbsd's socket")
		}
		return specs, obs, nil
	}
	sbs, err := controlOf(cn)
	if err != nil {
		return nil, nil, err
	}
	specs = append(specs, tool.CheckpointTools(sbs, cn.sandbox)...)
	if each {
		obs = agent.Observers{obs, &stepCheckpointer{ctx: ctx, sbs: sbs, sandbox: cn.sandbox, w: os.Stderr}}
	}
	return specs, obs, nil
}

// planeCheckpoints is the control plane, in process, as the checkpoint
// tools' Checkpointer (limbs serve's /mcp).
type planeCheckpoints struct{ p *control.Plane }

func (c planeCheckpoints) Checkpoint(ctx context.Context, sb string, req wire.CreateCheckpoint) (wire.Checkpoint, error) {
	return c.p.CreateCheckpoint(ctx, sb, req)
}

func (c planeCheckpoints) Checkpoints(ctx context.Context, sb string) ([]wire.Checkpoint, error) {
	return c.p.Checkpoints(ctx, sb)
}

func (c planeCheckpoints) Restore(ctx context.Context, sb, cp string) (wire.Restored, error) {
	return c.p.Restore(ctx, sb, cp)
}
