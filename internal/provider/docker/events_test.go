package docker

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/limbs-dev/limbs/internal/sandbox"
)

// fakeEngine speaks the two routes Events uses (/_ping and /events) over a
// Unix socket, so that an engine restart can be played without touching
// the machine's real engine, which others use.
type fakeEngine struct {
	mu     sync.Mutex
	calls  []string   // since= of each /events call
	rounds [][]string // events per connection: "action id second"
}

func (f *fakeEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Api-Version", "1.41")
	if strings.HasSuffix(r.URL.Path, "/_ping") {
		w.Write([]byte("OK"))
		return
	}
	if !strings.HasSuffix(r.URL.Path, "/events") {
		http.NotFound(w, r)
		return
	}
	f.mu.Lock()
	n := len(f.calls)
	f.calls = append(f.calls, r.URL.Query().Get("since"))
	var round []string
	if n < len(f.rounds) {
		round = f.rounds[n]
	}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	for _, e := range round {
		var action, id string
		var sec int64
		fmt.Sscan(e, &action, &id, &sec)
		json.NewEncoder(w).Encode(map[string]any{
			"Type": "container", "Action": action,
			"Actor":    map[string]any{"ID": "c_" + id, "Attributes": map[string]string{sandbox.LabelSandbox: id, "exitCode": "137"}},
			"time":     sec,
			"timeNano": sec * int64(time.Second),
		})
	}
	w.(http.Flusher).Flush()
	if n+1 >= len(f.rounds) {
		<-r.Context().Done() // the last connection stays open
	}
	// Returning ends the stream: the engine "restarted".
}

func TestEventsReconnect(t *testing.T) {
	dir, err := os.MkdirTemp("", "limbs-fake-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "docker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	fe := &fakeEngine{rounds: [][]string{
		{"start sb_a 100", "die sb_a 101"},
		// After the restart the engine replays from the second asked for.
		{"die sb_a 101", "start sb_a 102", "destroy sb_b 103"},
	}}
	srv := &http.Server{Handler: fe}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	p, err := New(t.Context(), Options{Host: "unix://" + sock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	evs, err := p.Events(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	type got struct{ ID, Kind, Reason string }
	var out []got
	for len(out) < 5 {
		ev, ok := <-evs
		if !ok {
			t.Fatalf("stream closed after %v", out)
		}
		out = append(out, got{ev.ID, string(ev.Kind), ev.Reason})
	}
	want := []got{
		{"sb_a", "started", ""},
		{"sb_a", "died", "daemon_exited"},
		{"", "resync", ""},
		{"sb_a", "started", ""},
		{"sb_b", "removed", "removed"},
	}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("events across an engine restart (-want +got):\n%s", diff)
	}
	fe.mu.Lock()
	defer fe.mu.Unlock()
	if diff := cmp.Diff([]string{"", "101"}, fe.calls); diff != "" {
		t.Errorf("since= of each connection (-want +got):\n%s", diff)
	}
}
