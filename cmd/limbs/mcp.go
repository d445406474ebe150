package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/limbs-dev/limbs/internal/control"
	"github.com/limbs-dev/limbs/internal/mcp"
	"github.com/limbs-dev/limbs/internal/tool"
	"github.com/limbs-dev/limbs/internal/wire"
)

func init() {
	commands["mcp"] = command{summary: "serve the agent tools over MCP on stdin/stdout (for Claude Code, Codex, Cursor, ...)", run: runMCP}
}

const mcpUsage = `usage: limbs mcp [flags]

Serves the limbs agent tools (shell_run, shell_input, shell_wait,
shell_read, shell_screen, session, str_replace_based_edit_tool,
apply_patch) over the Model Context Protocol on stdin and stdout, for an
MCP client that starts it (see docs/mcp.md). Where the tools run:

  --addr unix:///path/limbsd.sock   one limbsd (token: --token, LIMBS_TOKEN
                                    or the limbsd.token file next to it)
  --sandbox ID                      a sandbox of limbs serve (--addr is then
                                    limbs serve's, default ` + defaultControlAddr + `)
  --image IMG                       a new sandbox of limbs serve from IMG,
                                    removed when the client goes away

Logs go to stderr; stdout carries only the protocol.
`

// toolSet is the tool set of a --profile name (tool.ProfileNames).
func toolSet(profile string) (mcp.ToolSet, error) {
	sh := tool.NewShell(nil, tool.ShellOptions{})
	if _, err := tool.Profile(profile, sh, nil); err != nil {
		return nil, fmt.Errorf("--profile %q: %w", profile, err)
	}
	return func(sh *tool.Shell, files tool.Files) ([]tool.Spec, error) {
		return tool.Profile(profile, sh, files)
	}, nil
}

func runMCP(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("limbs mcp", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), mcpUsage+"\nflags:\n")
		fs.PrintDefaults()
	}
	cn := &conn{}
	fs.StringVar(&cn.addr, "addr", os.Getenv("LIMBS_ADDR"), "API address: unix:///path/limbsd.sock (one limbsd), or limbs serve's HOST:PORT or unix:// socket with --sandbox/--image (env LIMBS_ADDR)")
	fs.StringVar(&cn.token, "token", "", "bearer token (env LIMBS_TOKEN; default: the limbsd.token file next to the socket, or limbs serve's token file)")
	fs.StringVar(&cn.sandbox, "sandbox", os.Getenv("LIMBS_SANDBOX"), "sandbox id or name of limbs serve (env LIMBS_SANDBOX)")
	image := fs.String("image", "", "create a sandbox of limbs serve from this image, and remove it on exit")
	profile := fs.String("profile", "", "tool profile: "+strings.Join(tool.ProfileNames(), ", ")+" (the shapes models were trained on; default: the canonical tools)")
	keep := fs.Bool("keep-session", false, "leave the default session running when the client disconnects")
	allowSandboxes := fs.Bool("allow-sandboxes", false, "also serve sandbox_create, sandbox_list and sandbox_delete over limbs serve (with --sandbox or --image): the model may then create and remove sandboxes")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error (logs go to stderr)")
	if code, ok := parseFlagsOnly(fs, args, "mcp"); !ok {
		return code
	}
	if *image != "" && cn.sandbox != "" {
		fmt.Fprintln(os.Stderr, "limbs mcp: give --image (a new sandbox) or --sandbox (an existing one), not both")
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "limbs mcp: --log-level %q: use debug, info, warn or error\n", *logLevel)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ts, err := toolSet(*profile)
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs mcp: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *image != "" {
		id, remove, err := mcpSandbox(ctx, cn, *image)
		if err != nil {
			fmt.Fprintf(os.Stderr, "limbs mcp: %s\n", safeErr(err))
			return 1
		}
		defer remove()
		cn.sandbox = id
	}
	cl, err := cn.client()
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs mcp: %s\n", safeErr(err))
		return 1
	}
	if *allowSandboxes {
		sb, err := mcpControlSandboxes(cn) // mcp_sandboxes.go
		if err != nil {
			fmt.Fprintf(os.Stderr, "limbs mcp: %s\n", safeErr(err))
			return 2
		}
		ts = withSandboxes(ts, sb)
	}
	if cn.sandbox != "" {
		sbs, err := controlOf(cn) // checkpoint.go
		if err != nil {
			fmt.Fprintf(os.Stderr, "limbs mcp: %s\n", safeErr(err))
			return 2
		}
		ts = withCheckpoints(ts, sbs, cn.sandbox)
	}
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = cl.Health(hctx)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs mcp: cannot reach the sandbox: %s\n", safeErr(err))
		return 1
	}
	srv, err := mcp.NewServer(cl, cl.FileStore(), mcp.Options{Tools: ts, Logger: log, KeepDefaultSession: *keep})
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs mcp: %s\n", safeErr(err))
		return 1
	}
	// Run returns when stdin ends (the client went away) or on a signal.
	if err := srv.Run(ctx, &sdk.StdioTransport{}); err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
		log.Debug("the MCP connection ended", "err", err)
	}
	return 0
}

// mcpSandbox creates a sandbox of image through limbs serve and returns
// its id and the func that removes it.
func mcpSandbox(ctx context.Context, cn *conn, image string) (string, func(), error) {
	return newSandbox(ctx, cn, image, "limbs mcp")
}

// newSandbox is mcpSandbox for the verb prog (its messages' prefix).
func newSandbox(ctx context.Context, cn *conn, image, prog string) (string, func(), error) {
	addr := cn.addr
	if addr == "" {
		addr = defaultControlAddr
	}
	cc := &controlConn{addr: addr, token: cn.token}
	c, err := cc.client()
	if err != nil {
		return "", nil, err
	}
	sb, err := c.Create(ctx, wire.CreateSandbox{Image: image})
	if err != nil {
		return "", nil, fmt.Errorf("creating a sandbox of %s: %w", image, err)
	}
	if sb.Message != "" {
		fmt.Fprintf(os.Stderr, "%s: warning: %s\n", prog, safe(sb.Message))
	}
	cn.addr, cn.token = addr, c.Client().Token()
	remove := func() {
		rctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := c.Remove(rctx, sb.ID); err != nil && !errors.Is(err, wire.ErrNotFound) {
			fmt.Fprintf(os.Stderr, "%s: removing sandbox %s: %s; remove it with 'limbs sandbox rm %s'\n", prog, safe(sb.ID), safeErr(err), safe(sb.ID))
		}
	}
	return sb.ID, remove, nil
}

// mcpServeFlags are the flags of the MCP endpoint of limbs serve.
type mcpServeFlags struct {
	origins        originsFlag
	profile        string
	allowSandboxes bool
	image          string       // of the sandboxes made for /mcp sessions
	handler        *mcp.Handler // once mounted
}

// originsFlag collects repeated --mcp-origin.
type originsFlag []string

func (o *originsFlag) String() string { return strings.Join(*o, ",") }

func (o *originsFlag) Set(v string) error {
	if !strings.HasPrefix(v, "http://") && !strings.HasPrefix(v, "https://") || strings.Count(v, "/") > 2 && !strings.HasSuffix(v, "/") {
		return fmt.Errorf("%q: an origin is scheme://host[:port], e.g. https://app.example.com", v)
	}
	*o = append(*o, strings.TrimRight(v, "/"))
	return nil
}

func addMCPServeFlags(fs *flag.FlagSet) *mcpServeFlags {
	f := &mcpServeFlags{}
	fs.Var(&f.origins, "mcp-origin", "origin (scheme://host[:port]) whose web pages may use the MCP endpoints besides limbs serve's own host (repeatable)")
	fs.StringVar(&f.profile, "mcp-profile", "", "tool profile of the MCP endpoints: "+strings.Join(tool.ProfileNames(), ", "))
	fs.StringVar(&f.image, "mcp-image", "", "image of the sandbox made for each MCP session at /mcp that names no sandbox (default: the default provider's image)")
	fs.BoolVar(&f.allowSandboxes, "mcp-allow-sandboxes", false, "also serve sandbox_create, sandbox_list and sandbox_delete on the MCP endpoints: a model may then create and remove any sandbox of this control plane")
	return f
}

// mount serves the MCP endpoints (/mcp, /mcp?sandbox=ID and
// /v1/sandboxes/ID/mcp) in front of next. Each MCP session reaches its sandbox in-process through the
// control plane's Plane (the provider's checked Dial, the sandbox's own
// token), as the forwarded API does.
func (f *mcpServeFlags) mount(next http.Handler, plane *control.Plane, token string, log *slog.Logger) (http.Handler, error) {
	ts, err := toolSet(f.profile)
	if err != nil {
		return nil, err
	}
	if f.allowSandboxes {
		ts = withSandboxes(ts, plane) // in process: the Plane is the typed sandbox API
	}
	h, err := mcp.NewHTTPHandler(mcp.HTTPOptions{
		Token:          token,
		AllowedOrigins: f.origins,
		Logger:         log,
		Server:         mcp.Options{Tools: ts},
		Create:         autoSandboxes(plane, f.image, log), // mcp_sandboxes.go
		Checkpoints:    planeCheckpoints{plane},
		Connect: func(ctx context.Context, sandbox string) (tool.Sessions, tool.Files, error) {
			d, err := plane.Dial(ctx, sandbox)
			if err != nil {
				return nil, nil, err
			}
			c := d.Client()
			if _, err := c.Health(ctx); err != nil {
				return nil, nil, d.Explain(ctx, err)
			}
			return c, c.FileStore(), nil
		},
	})
	if err != nil {
		return nil, err
	}
	f.handler = h
	return mcp.Mount(h, next), nil
}
