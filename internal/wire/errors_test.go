package wire

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A gone error is 410 with the missing range, and comes back as one.
func TestGoneError(t *testing.T) {
	err := fmt.Errorf("session s_1: %w", &GoneError{From: 10, To: 20, Msg: "bytes 10..20 are no longer kept"})
	if status, code := StatusOf(err); status != http.StatusGone || code != "gone" {
		t.Fatalf("StatusOf = %d %q, want 410 gone", status, code)
	}
	w := httptest.NewRecorder()
	WriteError(w, err)
	body, _ := io.ReadAll(w.Result().Body)
	back := ErrorFromBody(w.Code, body)
	var re *RemoteError
	if !errors.Is(back, ErrGone) || !errors.As(back, &re) || len(re.Missing) != 2 || re.Missing[0] != 10 || re.Missing[1] != 20 {
		t.Fatalf("round trip of %s: %v (%+v)", body, back, re)
	}
}
