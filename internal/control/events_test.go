package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// lifecycle returns a sandbox's sandbox.* events over HTTP as
// "kind:reason" (created:, died:oom_killed, ...).
func (h *harness) lifecycle(t *testing.T, id string) []string {
	t.Helper()
	var l wire.EventList
	if err := h.c.JSON(context.Background(), "GET", "/sandboxes/"+id+"/events?type=sandbox.*", nil, &l); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range l.Events {
		var d wire.SandboxData
		_ = json.Unmarshal(e.Data, &d)
		out = append(out, strings.TrimPrefix(string(e.Type), "sandbox.")+":"+d.Reason)
	}
	return out
}

// allEvents reads a sandbox's whole log over HTTP, page by page.
func (h *harness) allEvents(t *testing.T, id, query string) []wire.Event {
	t.Helper()
	var out []wire.Event
	from := uint64(0)
	for range 1000 {
		var l wire.EventList
		if err := h.c.JSON(context.Background(), "GET", fmt.Sprintf("/sandboxes/%s/events?from=%d&limit=100%s", id, from, query), nil, &l); err != nil {
			t.Fatal(err)
		}
		out = append(out, l.Events...)
		if len(l.Events) == 0 {
			return out
		}
		from = l.Next
	}
	t.Fatal("the log never ended")
	return nil
}

func checkGapFree(t *testing.T, evs []wire.Event) {
	t.Helper()
	for i, ev := range evs {
		if ev.Seq != uint64(i)+1 {
			t.Fatalf("event %d has seq %d (%s), want %d: a gap or a duplicate", i, ev.Seq, ev.Type, i+1)
		}
	}
}

// TestEventLogAcrossRestart: the lifecycle events and an api.call per
// request land in one log whose seqs stay gap-free and in order across a
// restart of the control plane; type= filters it.
func TestEventLogAcrossRestart(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	dir := t.TempDir()
	h := start(t, dir, fp, nil)
	sb := h.create(t, wire.CreateSandbox{Name: "r"})
	for i := range 20 {
		if _, err := h.forward(sb.ID, fmt.Sprintf("/sessions?i=%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.c.JSON(context.Background(), "POST", "/sandboxes/r/stop", nil, nil); err != nil {
		t.Fatal(err)
	}
	h.close()
	h = start(t, dir, fp, nil)
	if err := h.c.JSON(context.Background(), "POST", "/sandboxes/r/start", nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := h.forward(sb.ID, "/sessions?after=restart"); err != nil {
		t.Fatal(err)
	}
	evs := h.allEvents(t, "r", "")
	checkGapFree(t, evs)
	var calls []string
	for _, ev := range evs {
		if ev.Type == wire.EventAPICall {
			var d wire.APICallData
			json.Unmarshal(ev.Data, &d)
			if d.Status == 0 || d.Caller == "" || ev.Source != wire.SourceAPI {
				t.Errorf("api.call without status or caller: %s", ev.Data)
			}
			calls = append(calls, d.Method+" "+d.Path)
		}
	}
	want := []string{"POST /v1/sandboxes"}
	for range 20 {
		want = append(want, "GET /v1/sandboxes/"+sb.ID+"/sessions")
	}
	want = append(want, "POST /v1/sandboxes/r/stop", "POST /v1/sandboxes/r/start", "GET /v1/sandboxes/"+sb.ID+"/sessions")
	if d := cmp.Diff(want, calls); d != "" {
		t.Errorf("api.call events (-want +got):\n%s", d)
	}
	if got := h.lifecycle(t, "r"); !slices.Equal(got, []string{"created:", "stopped:", "started:"}) {
		t.Errorf("lifecycle %v", got)
	}
	for _, ev := range h.allEvents(t, "r", "&type=api.call") {
		if ev.Type != wire.EventAPICall {
			t.Errorf("type=api.call answered a %s", ev.Type)
		}
	}
	if strings.Contains(fmt.Sprint(evs), testToken) {
		t.Error("the token is in the event log")
	}
}

// followSome follows a sandbox's log from from, as JSON lines or SSE (with
// Last-Event-ID), and hangs up after n events.
func (h *harness) followSome(t *testing.T, id string, from uint64, n int, sse bool) []wire.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := fmt.Sprintf("%s/v1/sandboxes/%s/events?follow=true&from=%d", h.ts.URL, id, from)
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	if sse {
		req.URL.RawQuery = "follow=true"
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Last-Event-ID", fmt.Sprint(from-1))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("follow: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var out []wire.Event
	lastID := ""
	for len(out) < n && sc.Scan() {
		ln := sc.Text()
		if sse {
			if v, ok := strings.CutPrefix(ln, "id: "); ok {
				lastID = v
			}
			v, ok := strings.CutPrefix(ln, "data: ")
			if !ok {
				continue
			}
			ln = v
		}
		var ev wire.Event
		if err := json.Unmarshal([]byte(ln), &ev); err != nil {
			t.Fatalf("a line of the stream: %q: %v", ln, err)
		}
		if sse && lastID != fmt.Sprint(ev.Seq) {
			t.Fatalf("SSE id %q for event %d", lastID, ev.Seq)
		}
		out = append(out, ev)
	}
	if len(out) < n {
		t.Fatalf("the stream ended after %d events: %v", len(out), sc.Err())
	}
	return out
}

// TestFollowReconnects: a follower that hangs up and follows again from
// its last seq 10 times while events keep coming (JSON lines and SSE)
// gets every event once, in order, the same as the log.
func TestFollowReconnects(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	h := start(t, t.TempDir(), fp, nil)
	sb := h.create(t, wire.CreateSandbox{})
	const calls = 400
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range calls {
			if _, err := h.forward(sb.ID, fmt.Sprintf("/sessions?n=%d", i)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var got []wire.Event
	next := uint64(1)
	for i := range 10 {
		evs := h.followSome(t, sb.ID, next, 30, i%2 == 1)
		got = append(got, evs...)
		next = evs[len(evs)-1].Seq + 1
	}
	<-done
	var rest wire.EventList
	if err := h.c.JSON(context.Background(), "GET", fmt.Sprintf("/sandboxes/%s/events?from=%d", sb.ID, next), nil, &rest); err != nil {
		t.Fatal(err)
	}
	got = append(got, rest.Events...)
	checkGapFree(t, got)
	all := h.allEvents(t, sb.ID, "")
	if d := cmp.Diff(all[:len(got)], got); d != "" || len(got) < calls {
		t.Errorf("followed %d events, log has %d; diff:\n%s", len(got), len(all), d)
	}
}

// TestGlobalFollow: GET /v1/events?follow=true across sandboxes, resumed
// from the last cursor + 1 after each hang-up, gets every event of every
// sandbox once, in cursor order.
func TestGlobalFollow(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	h := start(t, t.TempDir(), fp, nil)
	var ids []string
	for range 3 {
		ids = append(ids, h.create(t, wire.CreateSandbox{}).ID)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 300 {
			if _, err := h.forward(ids[i%3], "/sessions"); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	sbs := h.c.Sandboxes()
	var got []wire.Event
	from := uint64(0)
	for range 12 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		n := 0
		err := sbs.FollowAllEvents(ctx, client.EventsQuery{From: from}, func(ev wire.Event) error {
			got = append(got, ev)
			from = ev.Cursor + 1
			if n++; n == 40 {
				cancel()
			}
			return nil
		})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	<-done
	for range 100 {
		l, err := sbs.AllEvents(context.Background(), client.EventsQuery{From: from})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Events) == 0 {
			break
		}
		got = append(got, l.Events...)
		from = l.Next
	}
	seen := map[string]bool{}
	for i, ev := range got {
		if i > 0 && ev.Cursor <= got[i-1].Cursor {
			t.Fatalf("cursor %d after %d", ev.Cursor, got[i-1].Cursor)
		}
		seen[fmt.Sprintf("%s/%d", ev.Sandbox, ev.Seq)] = true
	}
	total := 0
	for _, id := range ids {
		for _, ev := range h.allEvents(t, id, "") {
			total++
			if !seen[fmt.Sprintf("%s/%d", id, ev.Seq)] {
				t.Errorf("the global stream missed %s/%d (%s)", id, ev.Seq, ev.Type)
			}
		}
	}
	if len(got) != total {
		t.Errorf("the global stream had %d events, the logs %d", len(got), total)
	}
}

// TestEventsOfDeletedSandbox: a deleted sandbox's log is read by its name
// or id within the retention, ends with sandbox.deleted and the DELETE's
// api.call, and is a 404 saying why once the sweeper removed it.
func TestEventsOfDeletedSandbox(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	h := startOpts(t, fp, Options{EventsKeepDeleted: time.Hour})
	sb := h.create(t, wire.CreateSandbox{Name: "gone"})
	if err := h.c.JSON(context.Background(), "DELETE", "/sandboxes/gone", nil, nil); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"gone", sb.ID} {
		evs := h.allEvents(t, ref, "")
		checkGapFree(t, evs)
		n := len(evs)
		if n < 3 || evs[n-2].Type != wire.EventSandboxDeleted || evs[n-1].Type != wire.EventAPICall {
			t.Errorf("events of the deleted sandbox by %s: %v", ref, evs)
		}
	}
	if _, err := h.c.Sandboxes().Get(context.Background(), "gone"); err == nil {
		t.Error("the deleted sandbox is still there")
	}
	h.srv.events.Sweep() // within the hour: kept
	if evs := h.allEvents(t, sb.ID, ""); len(evs) == 0 {
		t.Fatal("swept within its retention")
	}
	h.srv.events.MarkDeleted(sb.ID, time.Now().Add(-2*time.Hour))
	h.srv.events.Sweep()
	var l wire.EventList
	err := h.c.JSON(context.Background(), "GET", "/sandboxes/gone/events", nil, &l)
	if !errors.Is(err, wire.ErrNotFound) || !strings.Contains(err.Error(), "events-keep-deleted") {
		t.Errorf("events after the retention: %v, want 404 saying how long they are kept", err)
	}
}

// TestLegacyEventsMigrated: a registry of schema 1 (testdata of the
// store) keeps its events in the registry; the control plane moves them to
// the event log, seqs and times kept, once.
func TestLegacyEventsMigrated(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile("../store/testdata/limbs-v1.db")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "limbs.db"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	want := []string{"created:", "stopped:", "started:", "died:daemon_exited", "recovered:daemon_exited"}
	for round := range 2 {
		h := start(t, dir, fp, nil)
		if got := h.lifecycle(t, "web"); !slices.Equal(got, want) {
			t.Errorf("round %d: web's events %v, want %v", round, got, want)
		}
		evs := h.allEvents(t, "batch", "")
		checkGapFree(t, evs)
		if len(evs) != 3 || evs[1].Type != wire.EventSandboxOOM || !evs[2].Time.Equal(time.Date(2026, 11, 30, 12, 5, 0, 0, time.UTC)) {
			t.Errorf("round %d: batch's events %+v", round, evs)
		}
		if ids, _ := h.srv.db.EventLogs(); len(ids) != 0 {
			t.Errorf("the registry still holds events of %v", ids)
		}
		h.close()
	}
}

// BenchmarkFollowLatency: from an append to the event log (what the
// follower of limbsd's journal does) to a follower of GET
// /v1/sandboxes/{id}/events?follow=true over HTTP receiving it; reports
// p50 and p99 (target p99 under 100 ms).
func BenchmarkFollowLatency(b *testing.B) {
	fp := newFakeProvider()
	b.Cleanup(fp.closeAll)
	dir := b.TempDir()
	srv, err := New(context.Background(), Options{StateDir: dir, Token: testToken, Providers: map[string]Provider{"fake": fp}})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	b.Cleanup(func() { ts.Close(); srv.Close() })
	c, _ := client.New(ts.URL, testToken, "")
	sb, err := c.Sandboxes().Create(context.Background(), wire.CreateSandbox{})
	if err != nil {
		b.Fatal(err)
	}
	got := make(chan wire.Event, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	from := srv.events.Last(sb.ID) + 1
	go c.Sandboxes().FollowEvents(ctx, sb.ID, client.EventsQuery{From: from, Types: "command.*"}, func(ev wire.Event) error {
		got <- ev
		return nil
	})
	var lat []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := srv.events.Ingest(sb.ID, "j", wire.Event{Seq: uint64(len(lat) + 1), Type: wire.EventCommandStarted}); err != nil {
			b.Fatal(err)
		}
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			b.Fatal("the follower got nothing")
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "ms-p50")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "ms-p99")
}

// TestAnswerBeforeAPICall: a forwarded answer of known length reaches
// the caller before its api.call is recorded (the record is off the
// caller's path), and the api.call is still recorded once the answer is
// out.
func TestAnswerBeforeAPICall(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	h := start(t, t.TempDir(), fp, nil)
	sb := h.create(t, wire.CreateSandbox{Name: "quick"})
	unblock := holdFirstRecord(t, h.srv)
	got := make(chan error, 1)
	go func() {
		_, err := h.forward(sb.ID, "/sessions?answer=first")
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the answer waited for its api.call to be recorded")
	}
	unblock()
	testbin.Eventually(t, "the api.call recorded after the answer", 10*time.Second, func() bool {
		for _, ev := range h.allEvents(t, "quick", "&type=api.call") {
			var d wire.APICallData
			if json.Unmarshal(ev.Data, &d) == nil && d.Path == "/v1/sandboxes/"+sb.ID+"/sessions" && d.Status == http.StatusOK {
				return true
			}
		}
		return false
	})
}

// TestAnsweredCallBeforeDelete: a caller that has its answer and then
// deletes the sandbox, and makes another of its name, finds its call in
// the old sandbox's log before sandbox.deleted, and not in the new one's.
func TestAnsweredCallBeforeDelete(t *testing.T) {
	fp := newFakeProvider()
	t.Cleanup(fp.closeAll)
	h := startOpts(t, fp, Options{EventsKeepDeleted: time.Hour})
	old := h.create(t, wire.CreateSandbox{Name: "q"})
	e, err := h.srv.lookup(old.ID)
	if err != nil {
		t.Fatal(err)
	}
	unblock := holdFirstRecord(t, h.srv) // the GET's
	if _, err := h.forward("q", "/sessions"); err != nil {
		t.Fatal(err)
	}
	// The answer is in; its record is held. Another connection deletes.
	other, _ := client.New(h.ts.URL, testToken, "")
	deleted := make(chan error, 1)
	go func() { deleted <- other.JSON(context.Background(), "DELETE", "/sandboxes/q", nil, nil) }()
	testbin.Eventually(t, "the removal waiting for the pending record", 10*time.Second, e.calls.waiting)
	unblock()
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	renewed := h.create(t, wire.CreateSandbox{Name: "q"})
	var got []string
	for _, ev := range h.allEvents(t, old.ID, "") {
		k := string(ev.Type)
		if ev.Type == wire.EventAPICall {
			var d wire.APICallData
			json.Unmarshal(ev.Data, &d)
			k += " " + d.Method + " " + d.Path
		}
		got = append(got, k)
	}
	want := []string{"sandbox.created", "api.call POST /v1/sandboxes", "api.call GET /v1/sandboxes/q/sessions", "sandbox.deleted", "api.call DELETE /v1/sandboxes/q"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("the deleted sandbox's log (-want +got):\n%s", d)
	}
	for _, ev := range h.allEvents(t, renewed.ID, "&type=api.call") {
		var d wire.APICallData
		json.Unmarshal(ev.Data, &d)
		if d.Method == http.MethodGet {
			t.Errorf("the new sandbox %s has the old one's call: %s", renewed.ID, ev.Data)
		}
	}
}

// holdFirstRecord holds back the next api.call that recordCall records,
// after its answer went out, until the returned func is called (at the
// latest at the test's end); the records after it are not held.
func holdFirstRecord(t *testing.T, srv *Server) (release func()) {
	ch := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	var held atomic.Bool
	hook := func() {
		if held.CompareAndSwap(false, true) {
			<-ch
		}
	}
	srv.callHook.Store(&hook)
	t.Cleanup(func() {
		release()
		srv.callHook.Store(nil)
	})
	return release
}
