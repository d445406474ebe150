package runtime_test

import (
	"errors"
	"testing"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/runtime"
	"github.com/limbs-dev/limbs/internal/wire"
)

// TestClientDotSessionIDs: a session id "." or ".." through the client
// names no session; it must not land, through the mux's redirect of a
// cleaned path, on the session list (which decodes as an empty session).
func TestClientDotSessionIDs(t *testing.T) {
	srv := newServer(t, runtime.Options{Token: testToken})
	c, err := client.New(srv.URL, testToken, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{".", ".."} {
		if s, err := c.GetSession(t.Context(), id); !errors.Is(err, wire.ErrNotFound) {
			t.Errorf("GetSession(%q): %+v, %v; want not_found", id, s, err)
		}
		if err := c.DeleteSession(t.Context(), id); !errors.Is(err, wire.ErrNotFound) {
			t.Errorf("DeleteSession(%q): %v; want not_found", id, err)
		}
	}
}
