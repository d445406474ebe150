package control_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/control"
	"github.com/limbs-dev/limbs/internal/eventlog"
	"github.com/limbs-dev/limbs/internal/provider/local"
	"github.com/limbs-dev/limbs/internal/wire"
)

// kinds returns the kinds of a sandbox's events, in order.
func kinds[E any](evs []E, kind func(E) string) []string {
	var out []string
	for _, e := range evs {
		out = append(out, kind(e))
	}
	return out
}

// TestPlaneWithoutHTTP drives a sandbox's whole life through the Plane
// alone, as an MCP server or an agent in the same process would: no route,
// no handler, no token of limbs serve.
func TestPlaneWithoutHTTP(t *testing.T) {
	dir := stateDir(t)
	removeAll(t, dir)
	var pl *control.Plane = newPlane(t, dir, local.IsolateNone, nil).srv.Plane
	ctx := context.Background()

	sb, err := pl.Create(ctx, wire.CreateSandbox{Name: "direct"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := pl.Get(ctx, "direct"); err != nil || got.ID != sb.ID || got.Status != wire.SandboxRunning {
		t.Fatalf("Get by name = %+v, %v; want %s running", got, err, sb.ID)
	}
	if l, err := pl.List(ctx); err != nil || len(l) != 1 || l[0].ID != sb.ID {
		t.Fatalf("List = %+v, %v; want only %s", l, err, sb.ID)
	}

	// Dial reaches the sandbox's own limbsd, with the same client as a
	// bare limbsd.
	d, err := pl.Dial(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d.ID() != sb.ID {
		t.Errorf("Daemon.ID = %q, want %q", d.ID(), sb.ID)
	}
	lc := d.Client()
	s, err := lc.CreateSession(ctx, wire.CreateSession{Name: "main"})
	if err != nil {
		t.Fatal(err)
	}
	if r := exec1(t, lc, s.ID, "echo plane-$((6*7))"); !strings.Contains(r.Output, "plane-42") {
		t.Errorf("exec through Dial printed %q, want plane-42", r.Output)
	}
	// The Daemon is also a RoundTripper for forwarding: the caller names
	// limbsd's own path and adds the daemon's token.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://limbsd/v1/sessions", nil)
	d.Authorize(req.Header)
	resp, err := d.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), s.ID) {
		t.Errorf("GET /v1/sessions through the Daemon: %s %s", resp.Status, body)
	}

	if got, err := pl.Stop(ctx, "direct"); err != nil || got.Status != wire.SandboxStopped {
		t.Fatalf("Stop = %+v, %v; want stopped", got, err)
	}
	if _, err := pl.Dial(ctx, sb.ID); !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "limbs sandbox start") {
		t.Errorf("Dial of a stopped sandbox = %v, want unavailable saying how to start it", err)
	}
	if got, err := pl.Start(ctx, sb.ID); err != nil || got.Status != wire.SandboxRunning {
		t.Fatalf("Start = %+v, %v; want running", got, err)
	}
	if r := exec1(t, lc, s.ID, "echo again"); !strings.Contains(r.Output, "again") {
		t.Errorf("exec after Start printed %q", r.Output)
	}
	evs, err := pl.Events(ctx, sb.ID, 0, eventlog.Filter{"sandbox.*"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(kinds(evs.Events, func(e wire.Event) string { return string(e.Type) }), " ")
	if got != "sandbox.created sandbox.stopped sandbox.started" {
		t.Errorf("events %q, want created stopped started", got)
	}

	if err := pl.Remove(ctx, "direct"); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		func() error { _, err := pl.Get(ctx, sb.ID); return err }(),
		func() error { _, err := pl.Stop(ctx, sb.ID); return err }(),
		func() error { _, err := pl.Dial(ctx, sb.ID); return err }(),
		pl.Remove(ctx, sb.ID),
	} {
		if !errors.Is(err, wire.ErrNotFound) {
			t.Errorf("after Remove: %v, want not found", err)
		}
	}
}

// TestTypedSandboxClient runs the typed client against the handler of
// limbs serve on 127.0.0.1: the sandbox API, and a sandbox's sessions and
// files through the same methods as against a bare limbsd.
func TestTypedSandboxClient(t *testing.T) {
	dir := stateDir(t)
	removeAll(t, dir)
	p := newPlane(t, dir, local.IsolateNone, nil)
	ts := httptest.NewServer(control.NewServer(p.srv.Plane))
	t.Cleanup(ts.Close)
	if !strings.HasPrefix(ts.URL, "http://127.0.0.1:") {
		t.Fatalf("test server on %s, want loopback", ts.URL)
	}
	c, err := client.New(ts.URL, e2eToken, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sbs := c.Sandboxes()

	sb, err := sbs.Create(ctx, wire.CreateSandbox{Name: "typed"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := sbs.Get(ctx, "typed"); err != nil || got.ID != sb.ID {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if l, err := sbs.List(ctx); err != nil || len(l) != 1 || l[0].Name != "typed" {
		t.Fatalf("List = %+v, %v", l, err)
	}

	sc := c.Sandbox("typed")
	if h, err := sc.Health(ctx); err != nil || h.Status != "ok" {
		t.Errorf("Health through limbs serve = %+v, %v", h, err)
	}
	s, err := sc.CreateSession(ctx, wire.CreateSession{Name: "main"})
	if err != nil {
		t.Fatal(err)
	}
	if r := exec1(t, sc, s.ID, "echo typed-$((6*7))"); !strings.Contains(r.Output, "typed-42") {
		t.Errorf("exec printed %q, want typed-42", r.Output)
	}
	if _, err := sc.WriteFile(ctx, "/tmp/typed.txt", strings.NewReader("hello\n"), 0o644, ""); err != nil {
		t.Fatal(err)
	}
	rc, err := sc.ReadFile(ctx, "/tmp/typed.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "hello\n" {
		t.Errorf("ReadFile = %q", b)
	}

	if got, err := sbs.Stop(ctx, sb.ID); err != nil || got.Status != wire.SandboxStopped {
		t.Fatalf("Stop = %+v, %v", got, err)
	}
	if _, err := sc.ListSessions(ctx); !errors.Is(err, wire.ErrUnavailable) {
		t.Errorf("sessions of a stopped sandbox: %v, want unavailable", err)
	}
	if got, err := sbs.Start(ctx, "typed"); err != nil || got.Status != wire.SandboxRunning {
		t.Fatalf("Start = %+v, %v", got, err)
	}
	evs, err := sbs.Events(ctx, "typed", client.EventsQuery{From: 2, Types: "sandbox.*"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(kinds(evs.Events, func(e wire.Event) string { return strings.TrimPrefix(string(e.Type), "sandbox.") }), " "); got != "stopped started" {
		t.Errorf("events from 2: %q, want stopped started", got)
	}
	if err := sbs.Remove(ctx, "typed"); err != nil {
		t.Fatal(err)
	}
	if _, err := sbs.Get(ctx, "typed"); !errors.Is(err, wire.ErrNotFound) {
		t.Errorf("Get after Remove: %v, want not found", err)
	}
	// An id with a slash stays one path segment: it names no sandbox,
	// rather than another route.
	if _, err := sbs.Get(ctx, sb.ID+"/events"); !errors.Is(err, wire.ErrNotFound) {
		t.Errorf("Get of %q: %v, want not found", sb.ID+"/events", err)
	}
	wrong, _ := client.New(ts.URL, "wrong-token", "")
	if _, err := wrong.Sandboxes().List(ctx); !errors.Is(err, wire.ErrUnauthorized) {
		t.Errorf("List with a wrong token: %v, want unauthorized", err)
	}
}
