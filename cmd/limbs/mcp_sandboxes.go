package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/limbs-dev/limbs/internal/control"
	"github.com/limbs-dev/limbs/internal/wire"

	"github.com/limbs-dev/limbs/internal/mcp"
	"github.com/limbs-dev/limbs/internal/tool"
)

// withSandboxes adds the sandbox tools (sandbox_create, sandbox_list,
// sandbox_delete) over sb to every MCP session's tools; served only with
// limbs mcp --allow-sandboxes or limbs serve --mcp-allow-sandboxes.
func withSandboxes(ts mcp.ToolSet, sb tool.Sandboxes) mcp.ToolSet {
	return func(sh *tool.Shell, files tool.Files) ([]tool.Spec, error) {
		specs, err := ts(sh, files)
		if err != nil {
			return nil, err
		}
		return append(specs, tool.SandboxTools(sb)...), nil
	}
}

// mcpControlSandboxes is the control plane's sandbox API for limbs mcp
// --allow-sandboxes: limbs serve's, at the address and with the token the
// sandbox is reached with.
func mcpControlSandboxes(cn *conn) (tool.Sandboxes, error) {
	if cn.sandbox == "" {
		return nil, fmt.Errorf("--allow-sandboxes needs limbs serve: give --sandbox ID or --image IMG (with --addr limbs serve's address), not the socket of one limbsd")
	}
	addr := cn.addr
	if addr == "" {
		addr = defaultControlAddr
	}
	cc := &controlConn{addr: addr, token: cn.token}
	return cc.client()
}

// autoSandboxes makes the sandbox of an MCP session at /mcp that names
// none: of image (the control plane's default when empty), named mcp-N,
// removed by the func it returns.
func autoSandboxes(plane *control.Plane, image string, log *slog.Logger) func(ctx context.Context) (string, func(), error) {
	return func(ctx context.Context) (string, func(), error) {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		sb, err := plane.Create(ctx, wire.CreateSandbox{Image: image, Name: "mcp-" + hex.EncodeToString(b)})
		if err != nil {
			return "", nil, err
		}
		return sb.ID, func() {
			rctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := plane.Remove(rctx, sb.ID); err != nil && !errors.Is(err, wire.ErrNotFound) {
				log.Warn("removing the sandbox of an ended MCP session; remove it with 'limbs sandbox rm'", "sandbox", sb.ID, "err", err)
			}
		}, nil
	}
}

// close ends the MCP sessions of /mcp and removes the sandboxes made
// for them (limbs serve shutting down).
func (f *mcpServeFlags) close() {
	if f != nil && f.handler != nil {
		f.handler.Close()
	}
}
