package shell

import (
	"context"
	"fmt"
	"regexp"
)

// A truncated output ends in a note saying where the whole of it is. The
// path it names must work for the client that reads it: limbsd's own API
// serves it under /v1, limbs serve under /v1/sandboxes/{id}. The proxy of
// limbs serve says which in the request (runtime.commandContext puts it in
// the context); the note is built once, with that base, by the text cleaner
// (screen.Text.ResultNote), never patched into the text afterwards.

type apiBaseKey struct{}

// apiBases are the bases a note may name: limbsd's, and limbs serve's for
// a sandbox id or name.
var apiBases = regexp.MustCompile(`^/v1(/sandboxes/[A-Za-z0-9][A-Za-z0-9_.-]{0,127})?$`)

// WithAPIBase returns ctx with the API base the client reaches this
// session's endpoints under ("/v1", "/v1/sandboxes/sb_x"); any other value
// is ignored.
func WithAPIBase(ctx context.Context, base string) context.Context {
	if !apiBases.MatchString(base) {
		return ctx
	}
	return context.WithValue(ctx, apiBaseKey{}, base)
}

// apiBase is the base of ctx, "/v1" by default.
func apiBase(ctx context.Context) string {
	if b, ok := ctx.Value(apiBaseKey{}).(string); ok {
		return b
	}
	return "/v1"
}

// truncationNote words the note of a truncated output of [from, to).
func (s *Session) truncationNote(base string, from, to int64) func(int) string {
	return func(omitted int) string {
		return fmt.Sprintf("[... %d characters omitted; full output: GET %s/sessions/%s/output?from=%d&to=%d ...]", omitted, base, s.id, from, to)
	}
}
