package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Checkpoint takes a checkpoint of a sandbox (docs/checkpoints.md).
func (s *Sandboxes) Checkpoint(ctx context.Context, idOrName string, req wire.CreateCheckpoint) (wire.Checkpoint, error) {
	var cp wire.Checkpoint
	err := s.c.JSON(ctx, http.MethodPost, sandboxPath(idOrName, "/checkpoints"), req, &cp)
	return cp, err
}

// Checkpoints lists a sandbox's checkpoints, oldest first (a deleted
// sandbox's too, by its id).
func (s *Sandboxes) Checkpoints(ctx context.Context, idOrName string) ([]wire.Checkpoint, error) {
	var l wire.CheckpointList
	err := s.c.JSON(ctx, http.MethodGet, sandboxPath(idOrName, "/checkpoints"), nil, &l)
	return l.Checkpoints, err
}

// DeleteCheckpoint deletes one checkpoint.
func (s *Sandboxes) DeleteCheckpoint(ctx context.Context, idOrName, cp string) error {
	return s.c.JSON(ctx, http.MethodDelete, sandboxPath(idOrName, "/checkpoints/"+url.PathEscape(cp)), nil, nil)
}

// Restore puts checkpoint cp back into the sandbox and restarts its
// recorded sessions.
func (s *Sandboxes) Restore(ctx context.Context, idOrName, cp string) (wire.Restored, error) {
	var r wire.Restored
	err := s.c.JSON(ctx, http.MethodPost, sandboxPath(idOrName, "/checkpoints/"+url.PathEscape(cp)+"/restore"), nil, &r)
	return r, err
}

// Diff compares checkpoint a with checkpoint to, or with the sandbox now
// when to is "current" or empty.
func (s *Sandboxes) Diff(ctx context.Context, idOrName, a, to string) (wire.Diff, error) {
	if to == "" {
		to = "current"
	}
	var d wire.Diff
	err := s.c.JSON(ctx, http.MethodGet, sandboxPath(idOrName, "/checkpoints/"+url.PathEscape(a)+"/diff?to="+url.QueryEscape(to)), nil, &d)
	return d, err
}

// Fork starts req.Count sandboxes from a checkpoint of the sandbox.
func (s *Sandboxes) Fork(ctx context.Context, idOrName string, req wire.Fork) (wire.Forked, error) {
	var f wire.Forked
	err := s.c.JSON(ctx, http.MethodPost, sandboxPath(idOrName, "/fork"), req, &f)
	return f, err
}
