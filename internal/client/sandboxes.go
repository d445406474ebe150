package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Sandboxes is the sandbox API of `limbs serve` (/v1/sandboxes). Every
// method takes a sandbox's id or its name.
type Sandboxes struct{ c *Client }

// Sandboxes returns the sandbox API of the control plane c talks to (a
// client made with New(addr, token, "")).
func (c *Client) Sandboxes() *Sandboxes { return &Sandboxes{c: c} }

// Sandbox returns a client of the limbsd inside a sandbox of the control
// plane c talks to: its session and file methods are the same as against
// a bare limbsd, forwarded by `limbs serve`. It shares c's connections.
func (c *Client) Sandbox(idOrName string) *Client {
	sc := *c
	sc.base = c.base + sandboxPath(idOrName, "")
	return &sc
}

// Client is the control plane client these calls go through.
func (s *Sandboxes) Client() *Client { return s.c }

func sandboxPath(id, rest string) string {
	return "/sandboxes/" + url.PathEscape(id) + rest
}

// Create creates a sandbox and returns once its limbsd answers. A
// provider's warning about it (no isolation, ignored limits) is in
// Message.
func (s *Sandboxes) Create(ctx context.Context, req wire.CreateSandbox) (wire.Sandbox, error) {
	var sb wire.Sandbox
	err := s.c.JSON(ctx, http.MethodPost, "/sandboxes", req, &sb)
	return sb, err
}

// List lists the sandboxes, oldest first.
func (s *Sandboxes) List(ctx context.Context) ([]wire.Sandbox, error) {
	var l wire.SandboxList
	err := s.c.JSON(ctx, http.MethodGet, "/sandboxes", nil, &l)
	return l.Sandboxes, err
}

// Get describes one sandbox.
func (s *Sandboxes) Get(ctx context.Context, idOrName string) (wire.Sandbox, error) {
	var sb wire.Sandbox
	err := s.c.JSON(ctx, http.MethodGet, sandboxPath(idOrName, ""), nil, &sb)
	return sb, err
}

// Stop stops a sandbox, keeping its state for Start.
func (s *Sandboxes) Stop(ctx context.Context, idOrName string) (wire.Sandbox, error) {
	var sb wire.Sandbox
	err := s.c.JSON(ctx, http.MethodPost, sandboxPath(idOrName, "/stop"), nil, &sb)
	return sb, err
}

// Start starts a stopped (or failed) sandbox.
func (s *Sandboxes) Start(ctx context.Context, idOrName string) (wire.Sandbox, error) {
	var sb wire.Sandbox
	err := s.c.JSON(ctx, http.MethodPost, sandboxPath(idOrName, "/start"), nil, &sb)
	return sb, err
}

// Remove removes a sandbox and everything made for it.
func (s *Sandboxes) Remove(ctx context.Context, idOrName string) error {
	return s.c.JSON(ctx, http.MethodDelete, sandboxPath(idOrName, ""), nil, nil)
}
