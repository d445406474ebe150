package control_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// bodyRecorder keeps a copy of every answer's body a client reads.
type bodyRecorder struct {
	base http.RoundTripper
	mu   sync.Mutex
	buf  bytes.Buffer
}

func (r *bodyRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(resp.Body, writerFunc(func(p []byte) (int, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.buf.Write(p)
	})), resp.Body}
	return resp, nil
}

func (r *bodyRecorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func recordingClient(t *testing.T, addr, prefix string) (*client.Client, *bodyRecorder) {
	c, err := client.New(addr, e2eToken, prefix)
	if err != nil {
		t.Fatal(err)
	}
	hc := c.HTTPClient()
	rec := &bodyRecorder{base: hc.Transport}
	if rec.base == nil {
		rec.base = http.DefaultTransport
	}
	hc.Transport = rec
	return c, rec
}

// TestSecretNeverLeaves: a sandbox created with a secret env value runs
// commands that print it and name it; no answer of a real `limbs serve`
// (exec results, the raw output stream, the sandbox, its events), no line
// of its log (at debug level) and no file of its state dir holds the
// value. The registry (limbs.db, mode 0600, which keeps the value to mask
// it after a restart, as it keeps each sandbox's token) and the sandbox's
// own directory (sandboxes/ID: its limbsd's state, the sandbox's own
// copy) are the two places it is kept.
func TestSecretNeverLeaves(t *testing.T) {
	for _, provider := range []string{"local", "docker"} {
		t.Run(provider, func(t *testing.T) { testSecretNeverLeaves(t, provider) })
	}
}

func testSecretNeverLeaves(t *testing.T, provider string) {
	const sec = "tr0ub4dor-S3CRET-x9"
	var instance string
	if provider == "docker" {
		dockerOrSkip(t, "")
		cleanDocker(t, &instance)
	}
	dir := stateDir(t)
	removeAll(t, dir)
	addr := freeAddr(t)
	sp := startServe(t, addr, "--state-dir", dir, "--provider", provider, "--isolation", "none", "--log-level", "debug")
	ctl, rec := recordingClient(t, addr, "")
	ctx := context.Background()
	sbs := ctl.Sandboxes()
	sb, err := sbs.Create(ctx, wire.CreateSandbox{Name: "sec", Env: map[string]string{"API_KEY": sec, "OTHER": "visible-1234"}, SecretEnv: []string{"API_KEY"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sbs.Remove(context.Background(), sb.ID) })
	if provider == "docker" {
		// The registry is serve's (locked): the instance is on the
		// container's labels.
		out, err := exec.Command("docker", "ps", "-a", "--filter", "label=limbs.sandbox="+sb.ID, "--format", `{{.Label "limbs.instance"}}`).Output()
		if instance = strings.TrimSpace(string(out)); err != nil || instance == "" {
			t.Fatalf("the instance of sandbox %s: %q, %v", sb.ID, out, err)
		}
	}
	c, crec := recordingClient(t, addr, "/sandboxes/sec")
	if _, err := c.CreateSession(ctx, wire.CreateSession{Name: "main"}); err != nil {
		t.Fatal(err)
	}
	yield := 10.0
	var outputs string
	for _, cmd := range []string{"echo key=$API_KEY other=$OTHER", "echo " + sec + " typed", "env | grep API_KEY", "printf '%s' \"$API_KEY\" | cut -c1-8; echo \"[$API_KEY]\""} {
		r, err := c.Exec(ctx, "main", wire.Exec{Command: cmd, YieldAfter: &yield})
		if err != nil {
			t.Fatal(err)
		}
		outputs += r.Output
	}
	if !strings.Contains(outputs, "key=*** other=visible-1234") || !strings.Contains(outputs, "[***]") {
		t.Errorf("exec outputs do not show the value masked:\n%s", outputs)
	}
	if rc, err := c.Output(ctx, "main", 0, -1); err == nil {
		io.Copy(io.Discard, rc)
		rc.Close()
	} else {
		t.Fatal(err)
	}
	if _, err := sbs.Get(ctx, "sec"); err != nil {
		t.Fatal(err)
	}
	if _, err := sbs.Events(ctx, "sec", client.EventsQuery{}); err != nil {
		t.Fatal(err)
	}
	if _, err := sbs.AllEvents(ctx, client.EventsQuery{}); err != nil {
		t.Fatal(err)
	}
	forms := []string{sec, base64.StdEncoding.EncodeToString([]byte(sec))[:16]}
	for what, text := range map[string]string{"answers": rec.String() + crec.String(), "log": sp.log.String()} {
		for _, f := range forms {
			if strings.Contains(text, f) {
				t.Errorf("the %s of limbs serve hold the secret (%q):\n%s", what, f, text)
			}
		}
	}
	if !strings.Contains(crec.String(), "***") {
		t.Error("no answer shows a mask: the test saw nothing to mask")
	}
	err = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "limbs.db" || rel == "sandboxes" {
			if fi.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			for _, f := range forms {
				if bytes.Contains(b, []byte(f)) {
					t.Errorf("%s holds the secret", rel)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sbs.Remove(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
}

// TestServeKill9KeepsEvents: a real `limbs serve` is killed with SIGKILL
// while a follower reads its event log; the restarted one has every event
// the follower saw, byte for byte, its seqs gap-free and in order, and
// goes on after them. Once the sandbox is deleted, `limbs events` still
// prints its log.
func TestServeKill9KeepsEvents(t *testing.T) {
	dir := stateDir(t)
	removeAll(t, dir)
	addr := freeAddr(t)
	args := []string{"--state-dir", dir, "--provider", "local", "--isolation", "none"}
	sp := startServe(t, addr, args...)
	ctl, _ := client.New(addr, e2eToken, "")
	sbs := ctl.Sandboxes()
	ctx := context.Background()
	sb, err := sbs.Create(ctx, wire.CreateSandbox{Name: "k9ev"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sbs.Remove(context.Background(), sb.ID) })
	sc := ctl.Sandbox("k9ev")
	fctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	var seen []wire.Event
	followed := make(chan error, 1)
	go func() {
		followed <- sbs.FollowEvents(fctx, "k9ev", client.EventsQuery{}, func(ev wire.Event) error {
			mu.Lock()
			seen = append(seen, ev)
			mu.Unlock()
			return nil
		})
	}()
	for range 30 {
		if _, err := sc.ListSessions(ctx); err != nil {
			t.Fatal(err)
		}
	}
	testbin.Eventually(t, "the follower sees the calls", 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) >= 31
	})
	sp.kill()
	<-followed // the stream broke with the kill
	cancel()
	startServe(t, addr, args...)
	if _, err := sc.ListSessions(ctx); err != nil {
		t.Fatal(err)
	}
	var all []wire.Event
	for from := uint64(0); ; {
		l, err := sbs.Events(ctx, "k9ev", client.EventsQuery{From: from})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Events) == 0 {
			break
		}
		all = append(all, l.Events...)
		from = l.Next
	}
	for i, ev := range all {
		if ev.Seq != uint64(i)+1 {
			t.Fatalf("event %d has seq %d: a gap or a duplicate", i, ev.Seq)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, ev := range seen {
		a, _ := json.Marshal(ev)
		b, _ := json.Marshal(all[i])
		if !bytes.Equal(a, b) {
			t.Errorf("seen before the kill:\n%s\nin the log after:\n%s", a, b)
		}
	}
	last := all[len(all)-1]
	if len(all) <= len(seen) || last.Type != wire.EventAPICall {
		t.Errorf("after the restart the log ends with %+v (%d events, %d seen)", last, len(all), len(seen))
	}

	if err := sbs.Remove(ctx, "k9ev"); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(limbsBinary(t), "events", "k9ev", "--type", "sandbox.*")
	cmd.Env = append(os.Environ(), "LIMBS_ADDR="+addr, "LIMBS_TOKEN="+e2eToken)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "sandbox.created") || !strings.Contains(string(out), "sandbox.deleted (removed)") {
		t.Errorf("limbs events of the deleted sandbox: %v\n%s", err, out)
	}
	cmd = exec.Command(limbsBinary(t), "events", "--json", "k9ev")
	cmd.Env = append(os.Environ(), "LIMBS_ADDR="+addr, "LIMBS_TOKEN="+e2eToken)
	out, err = cmd.Output()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil || len(lines) != len(all)+2 {
		t.Errorf("limbs events --json: %v, %d lines, want %d", err, len(lines), len(all)+2)
	}
	for _, ln := range lines {
		var ev wire.Event
		if json.Unmarshal([]byte(ln), &ev) != nil || ev.Seq == 0 {
			t.Errorf("limbs events --json printed %q", ln)
		}
	}
	_ = fmt.Sprint
}
