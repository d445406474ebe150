package client

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A followed journal's line longer than MaxEventLine ends the stream with
// an error instead of growing the reader's memory without bound; the
// lines before it, split over reads, are read whole.
func TestFollowEventsLineBound(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"journal":"j_x","version":1,"first":1,"next":2}` + "\n\n"))
		w.Write([]byte(`{"seq":1,"type":"output","source":"system","data":{"text":"` + strings.Repeat("a", 100<<10) + `"}}` + "\n"))
		w.Write(bytes.Repeat([]byte("b"), MaxEventLine+1))
	}))
	defer hs.Close()
	c, err := New(hs.URL, "", "")
	if err != nil {
		t.Fatal(err)
	}
	es, err := c.FollowEvents(context.Background(), 1, true)
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	if es.Info.Journal != "j_x" {
		t.Fatalf("info %+v", es.Info)
	}
	if ev, err := es.Next(); err != nil || ev.Seq != 1 {
		t.Fatalf("first event: %+v, %v", ev, err)
	}
	if _, err := es.Next(); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("a line past the bound: %v, want an error saying so", err)
	}
}
