package runtime_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/journal"
	"github.com/limbs-dev/limbs/internal/runtime"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// allEvents reads the whole journal, page by page.
func allEvents(t *testing.T, c *client.Client, withBytes bool) []wire.Event {
	t.Helper()
	var out []wire.Event
	from := uint64(1)
	for range 10000 {
		l, err := c.Events(t.Context(), from, 500, withBytes)
		if err != nil {
			t.Fatalf("GET /v1/events?from=%d: %v", from, err)
		}
		if len(l.Events) == 0 {
			return out
		}
		out = append(out, l.Events...)
		from = l.Next
	}
	t.Fatal("the journal did not end")
	return nil
}

// eventsUntil reads the journal until one event satisfies ok.
func eventsUntil(t *testing.T, c *client.Client, what string, ok func(wire.Event) bool) []wire.Event {
	t.Helper()
	var evs []wire.Event
	testbin.Eventually(t, what, 20*time.Second, func() bool {
		evs = allEvents(t, c, false)
		for _, ev := range evs {
			if ok(ev) {
				return true
			}
		}
		return false
	})
	return evs
}

func dataOf[T any](t *testing.T, ev wire.Event) T {
	t.Helper()
	var d T
	if err := json.Unmarshal(ev.Data, &d); err != nil {
		t.Fatalf("event %d (%s): data %s: %v", ev.Seq, ev.Type, ev.Data, err)
	}
	return d
}

func checkSeqs(t *testing.T, evs []wire.Event) {
	t.Helper()
	for i, ev := range evs {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d: the journal's seqs must run from 1 without a gap or a repeat", i, ev.Seq)
		}
	}
}

// TestEventsRecordEverything runs one of each thing a journal records and
// checks each event and its fields.
func TestEventsRecordEverything(t *testing.T) {
	d := startDaemon(t, "--token", testToken)
	c := d.client(t, testToken)
	ctx := t.Context()
	work := filepath.Join(d.dir, "work")
	s, err := c.CreateSession(ctx, wire.CreateSession{Name: "rec", Cols: 100, Rows: 30})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Resize(ctx, s.ID, 120, 40); err != nil {
		t.Fatal(err)
	}
	y := 20.0
	r1, err := c.Exec(ctx, s.ID, wire.Exec{Command: "cd /tmp && echo hello-journal", YieldAfter: &y})
	if err != nil || r1.Output != "hello-journal\n" {
		t.Fatalf("exec: %+v %v", r1, err)
	}
	ri, err := c.Input(ctx, s.ID, wire.Input{Text: "echo typed-line\n", YieldAfter: &y})
	if err != nil || ri.CommandID == "" {
		t.Fatalf("a line typed through input: %+v %v", ri, err)
	}
	r2, err := c.Exec(ctx, s.ID, wire.Exec{Command: "sleep 30", Timeout: 0.3, YieldAfter: &y})
	if err != nil || r2.Status != wire.StatusTimeout {
		t.Fatalf("exec with a timeout: %+v %v", r2, err)
	}
	short := 3.0
	r3, err := c.Exec(ctx, s.ID, wire.Exec{Command: "read -s -p 'Password: ' PW; echo; echo len=${#PW}", YieldAfter: &short})
	if err != nil || !r3.WaitingForInput || !r3.EchoOff {
		t.Fatalf("a password prompt: %+v %v", r3, err)
	}
	const secret = "hunter2-s3cret"
	r4, err := c.Input(ctx, s.ID, wire.Input{Text: secret + "\n", YieldAfter: &y})
	if err != nil || !strings.Contains(r4.Output, "len=14") {
		t.Fatalf("typing the password: %+v %v", r4, err)
	}
	sum, err := c.WriteFile(ctx, "a.txt", strings.NewReader("one\ntwo\n"), 0, "")
	if err != nil {
		t.Fatal(err)
	}
	old, nw := "two", "three"
	if _, err := c.Edit(ctx, wire.Edit{Command: "str_replace", Path: filepath.Join(work, "a.txt"), OldStr: &old, NewStr: &nw}); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteFile(ctx, "a.txt", false); err != nil {
		t.Fatal(err)
	}
	r5, err := c.Exec(ctx, s.ID, wire.Exec{Command: "cd " + work + " && echo data > made.txt && sleep 0.5", YieldAfter: &y})
	if err != nil || r5.ExitCode == nil || *r5.ExitCode != 0 {
		t.Fatalf("exec writing a file: %+v %v", r5, err)
	}
	if _, err := c.Restart(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	evs := eventsUntil(t, c, "the session's close in the journal", func(ev wire.Event) bool { return ev.Type == wire.EventSessionClosed })
	checkSeqs(t, evs)

	byType := map[wire.EventType][]wire.Event{}
	started := map[string]wire.Event{}
	for _, ev := range evs {
		byType[ev.Type] = append(byType[ev.Type], ev)
		if ev.Type == wire.EventCommandStarted {
			started[ev.Command] = ev
		}
	}
	for _, typ := range []wire.EventType{
		wire.EventSessionCreated, wire.EventSessionResized, wire.EventSessionExited, wire.EventSessionRestarted, wire.EventSessionClosed,
		wire.EventCommandStarted, wire.EventCommandFinished, wire.EventCommandSignal, wire.EventCommandWaiting,
		wire.EventInput, wire.EventOutput, wire.EventFileWritten, wire.EventFileEdited, wire.EventFileDeleted, wire.EventFileChanged,
	} {
		if len(byType[typ]) == 0 {
			t.Errorf("no %s event in the journal", typ)
		}
	}
	if t.Failed() {
		for _, ev := range evs {
			t.Logf("%d %s %s %s %s", ev.Seq, ev.Type, ev.Session, ev.Command, ev.Data)
		}
		t.FailNow()
	}
	if cr := dataOf[wire.SessionData](t, byType[wire.EventSessionCreated][0]); byType[wire.EventSessionCreated][0].Session != s.ID || cr.Name != "rec" || cr.Cols != 100 || cr.Rows != 30 {
		t.Errorf("session.created: %+v", cr)
	}
	if rs := dataOf[wire.SessionData](t, byType[wire.EventSessionResized][0]); rs.Cols != 120 || rs.Rows != 40 {
		t.Errorf("session.resized: %+v", rs)
	}
	reasons := map[string]bool{}
	for _, ev := range byType[wire.EventSessionExited] {
		reasons[dataOf[wire.SessionData](t, ev).Reason] = true
	}
	if !reasons["restart requested"] || !reasons["session deleted"] {
		t.Errorf("session.exited reasons %v, want restart requested and session deleted", reasons)
	}
	if rs := dataOf[wire.SessionData](t, byType[wire.EventSessionRestarted][0]); rs.Reason != "restart requested" || byType[wire.EventSessionRestarted][0].Source != wire.SourceAPI {
		t.Errorf("session.restarted: %+v", rs)
	}
	finished := map[string]wire.CommandFinishedData{}
	for _, ev := range byType[wire.EventCommandFinished] {
		st, ok := started[ev.Command]
		if !ok || ev.Cause != st.Seq {
			t.Errorf("command.finished of %s has cause %d, want its command.started's seq %d", ev.Command, ev.Cause, st.Seq)
		}
		finished[ev.Command] = dataOf[wire.CommandFinishedData](t, ev)
	}
	st1 := dataOf[wire.CommandStartedData](t, started[r1.CommandID])
	if st1.Text != "cd /tmp && echo hello-journal" || st1.Via != "exec" || st1.Cwd != work || started[r1.CommandID].Source != wire.SourceAPI || st1.OffsetStart != r1.OffsetStart {
		t.Errorf("command.started of the first command: %+v (%s)", st1, started[r1.CommandID].Source)
	}
	f1 := finished[r1.CommandID]
	if f1.Status != wire.StatusExited || f1.ExitCode == nil || *f1.ExitCode != 0 || f1.Cwd != "/tmp" || f1.OffsetStart != r1.OffsetStart || f1.OffsetEnd != r1.OffsetEnd || f1.DurationMs < 0 {
		t.Errorf("command.finished of the first command: %+v, result %+v", f1, r1)
	}
	if sti := dataOf[wire.CommandStartedData](t, started[ri.CommandID]); sti.Via != "input" || started[ri.CommandID].Source != wire.SourceAPI {
		t.Errorf("command.started of a line typed through input: %+v (%s)", sti, started[ri.CommandID].Source)
	}
	if fi := finished[ri.CommandID]; fi.Status != wire.StatusExited || fi.ExitCode == nil || *fi.ExitCode != 0 {
		t.Errorf("command.finished of a line typed through input: %+v", fi)
	}
	if f2 := finished[r2.CommandID]; f2.Status != wire.StatusTimeout || f2.Signal == "" {
		t.Errorf("command.finished of the timed-out command: %+v", f2)
	}
	sig := dataOf[wire.SignalData](t, byType[wire.EventCommandSignal][0])
	if byType[wire.EventCommandSignal][0].Command != r2.CommandID || sig.Signal != "SIGINT" || sig.Why != "timeout" {
		t.Errorf("command.signal: %+v of %s", sig, byType[wire.EventCommandSignal][0].Command)
	}
	w := dataOf[wire.WaitingData](t, byType[wire.EventCommandWaiting][0])
	if byType[wire.EventCommandWaiting][0].Command != r3.CommandID || !w.Waiting || !w.EchoOff {
		t.Errorf("command.waiting: %+v", w)
	}
	if in := dataOf[wire.InputData](t, byType[wire.EventInput][0]); in.Masked || in.Text != "echo typed-line\n" {
		t.Errorf("input typed at the shell's prompt: %+v, want it as typed", in)
	}
	in := dataOf[wire.InputData](t, byType[wire.EventInput][1])
	if !in.Masked || in.Text != strings.Repeat("*", len(secret)+1) || byType[wire.EventInput][1].Command != r3.CommandID {
		t.Errorf("input typed with echo off: %+v, want masked", in)
	}
	fw := dataOf[wire.FileData](t, byType[wire.EventFileWritten][0])
	if fw.Path != "a.txt" || fw.Size != 8 || fw.SHA256 != sum {
		t.Errorf("file.written: %+v, want a.txt of 8 bytes with sha256 %s", fw, sum)
	}
	if fe := dataOf[wire.FileData](t, byType[wire.EventFileEdited][0]); fe.Edit != "str_replace" || fe.SHA256 == "" || !strings.HasSuffix(fe.Path, "a.txt") {
		t.Errorf("file.edited: %+v", fe)
	}
	if fd := dataOf[wire.FileData](t, byType[wire.EventFileDeleted][0]); fd.Path != "a.txt" {
		t.Errorf("file.deleted: %+v", fd)
	}
	made := false
	for _, ev := range byType[wire.EventFileChanged] {
		fc := dataOf[wire.FileData](t, ev)
		if fc.Path == "made.txt" && ev.Command == r5.CommandID && ev.Session == s.ID {
			made = true
			if fc.Size != 5 {
				t.Errorf("file.changed of made.txt: size %d, want 5", fc.Size)
			}
		}
	}
	if !made {
		t.Errorf("no file.changed of made.txt attributed to %s/%s: %v", s.ID, r5.CommandID, byType[wire.EventFileChanged])
	}

	// The password is nowhere: not in the journal's answer, not in any
	// file of the state directory.
	resp, err := c.Do(ctx, http.MethodGet, "/events?from=1&output=bytes&limit=10000", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if bytes.Contains(body, []byte(secret)) {
		t.Errorf("the password typed with echo off is in GET /v1/events")
	}
	if resp.Header.Get(wire.JournalHeader) == "" {
		t.Errorf("no %s header", wire.JournalHeader)
	}
	_ = filepath.WalkDir(filepath.Join(d.dir, "state"), func(p string, e os.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(secret)) {
			t.Errorf("the password typed with echo off is in %s", p)
		}
		return nil
	})
}

// TestEventsFollowReconnects follows a chatty command with output=bytes,
// reconnecting with from=last+1 after a few events each time: every event
// arrives once, in order, and the bytes are the session's raw output.
func TestEventsFollowReconnects(t *testing.T) {
	d := startDaemon(t, "--token", testToken)
	c := d.client(t, testToken)
	ctx := t.Context()
	s, err := c.CreateSession(ctx, wire.CreateSession{Name: "chatty"})
	if err != nil {
		t.Fatal(err)
	}
	y := 60.0
	done := make(chan wire.Result, 1)
	go func() {
		r, err := c.Exec(context.WithoutCancel(ctx), s.ID, wire.Exec{Command: "for i in $(seq 1 30); do seq -f 'line %g of a chatty command' 1 3000; sleep 0.02; done", YieldAfter: &y})
		if err != nil {
			t.Errorf("exec: %v", err)
		}
		done <- r
	}()
	var got []wire.Event
	from := uint64(1)
	journalID := ""
	reconnects := 0
	finished := false
	deadline := time.Now().Add(60 * time.Second)
	for !finished && time.Now().Before(deadline) {
		es, err := c.FollowEvents(ctx, from, true)
		if err != nil {
			t.Fatal(err)
		}
		if journalID == "" {
			journalID = es.Info.Journal
		} else if es.Info.Journal != journalID {
			t.Fatalf("journal id changed from %s to %s without a restart", journalID, es.Info.Journal)
		}
		for range 3 + reconnects%7 {
			ev, err := es.Next()
			if err != nil {
				t.Fatalf("following: %v", err)
			}
			got = append(got, ev)
			from = ev.Seq + 1
			if ev.Type == wire.EventCommandFinished {
				finished = true
				break
			}
		}
		es.Close()
		reconnects++
	}
	r := <-done
	if !finished {
		t.Fatalf("the command's end did not arrive (%d events, %d reconnects)", len(got), reconnects)
	}
	if reconnects < 10 {
		t.Errorf("only %d reconnects: the command was not chatty enough to test them", reconnects)
	}
	checkSeqs(t, got)
	var out []byte
	for _, ev := range got {
		if ev.Type == wire.EventGap {
			t.Fatalf("a gap while following: %s", ev.Data)
		}
		if ev.Type != wire.EventOutput {
			continue
		}
		od := dataOf[wire.OutputData](t, ev)
		if od.Offset != int64(len(out)) || int64(len(od.Bytes)) != od.Size {
			t.Fatalf("output event %d covers %d+%d with %d bytes; want it to start at %d", ev.Seq, od.Offset, od.Size, len(od.Bytes), len(out))
		}
		out = append(out, od.Bytes...)
	}
	rc, err := c.Output(ctx, s.ID, 0, r.OffsetEnd)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(rc)
	rc.Close()
	if len(out) < len(raw) || !bytes.Equal(out[:len(raw)], raw) {
		t.Errorf("the output events' bytes (%d) are not the session's raw output (%d)", len(out), len(raw))
	}
	if len(raw) < 1<<20 {
		t.Errorf("the command printed %d bytes: not chatty", len(raw))
	}
}

// TestEventsSSE checks the answer to Accept: text/event-stream.
func TestEventsSSE(t *testing.T) {
	d := startDaemon(t, "--token", testToken)
	c := d.client(t, testToken)
	if _, err := c.CreateSession(t.Context(), wire.CreateSession{Name: "sse"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.Base()+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	var lines []string
	for len(lines) < 6 && sc.Scan() {
		if sc.Text() != "" {
			lines = append(lines, sc.Text())
		}
	}
	id := resp.Header.Get(wire.JournalHeader)
	if len(lines) < 4 || lines[0] != "event: journal" || !strings.Contains(lines[1], `"journal":"`+id+`"`) || lines[2] != "id: 1" || !strings.Contains(lines[3], `"type":"session.created"`) {
		t.Errorf("SSE answer begins %q; want the journal message, then id: 1 and session.created", lines)
	}
}

// TestEventsSlowFollowerGap: a follower that stops reading while the
// journal's bounds drop what it has not read gets a log.gap, and the
// shell never waits for it.
func TestEventsSlowFollowerGap(t *testing.T) {
	d := startDaemon(t, "--token", testToken, "--journal-memory", "16", "--journal-max-disk", "16KiB")
	c := d.client(t, testToken)
	ctx := t.Context()
	s, err := c.CreateSession(ctx, wire.CreateSession{Name: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	es, err := c.FollowEvents(ctx, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	if _, err := es.Next(); err != nil {
		t.Fatal(err)
	}
	y := 60.0
	r, err := c.Exec(ctx, s.ID, wire.Exec{Command: "head -c 20000000 /dev/zero | tr '\\0' x; echo", YieldAfter: &y})
	if err != nil || r.ExitCode == nil {
		t.Fatalf("exec: %+v %v", r, err)
	}
	next := uint64(2)
	gaps := 0
	for range 100000 {
		ev, err := es.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == wire.EventGap {
			g := dataOf[wire.GapData](t, ev)
			if g.From != next || ev.Seq != g.To-1 || g.Reason == "" {
				t.Fatalf("gap %+v (seq %d) after seq %d", g, ev.Seq, next-1)
			}
			gaps++
			next = g.To
			continue
		}
		if ev.Seq != next {
			t.Fatalf("seq %d after %d", ev.Seq, next-1)
		}
		next++
		if ev.Type == wire.EventCommandFinished {
			break
		}
	}
	if gaps == 0 {
		t.Errorf("a follower that fell behind the journal's bounds got no log.gap")
	}
}

// TestEventsLimbsdRestartEndsCutCommand: limbsd killed with kill -9 while
// a command runs; the next limbsd records the command's end as lost, with
// the reason, and the session's shell's end, in the same journal.
func TestEventsLimbsdRestartEndsCutCommand(t *testing.T) {
	d := startDaemon(t, "--token", testToken)
	c := d.client(t, testToken)
	ctx := t.Context()
	s, err := c.CreateSession(ctx, wire.CreateSession{Name: "cut"})
	if err != nil {
		t.Fatal(err)
	}
	y := 0.5
	r, err := c.Exec(ctx, s.ID, wire.Exec{Command: "echo before; sleep 100", YieldAfter: &y})
	if err != nil || r.Status != wire.StatusRunning {
		t.Fatalf("exec: %+v %v", r, err)
	}
	before := eventsUntil(t, c, "the command's start", func(ev wire.Event) bool { return ev.Type == wire.EventCommandStarted })
	l, _ := c.Events(ctx, 1, 1, false)
	_ = d.cmd.Process.Kill()
	<-d.exited

	d2 := startDaemonAt(t, d.dir, testToken, "--token", testToken)
	c2 := d2.client(t, testToken)
	evs := eventsUntil(t, c2, "the new shell", func(ev wire.Event) bool { return ev.Type == wire.EventSessionRestarted })
	checkSeqs(t, evs)
	l2, _ := c2.Events(ctx, 1, 1, false)
	if l.Journal == "" || l2.Journal != l.Journal {
		t.Errorf("journal id %q after the restart, %q before: want the same journal", l2.Journal, l.Journal)
	}
	for i, ev := range before {
		if ev.Seq != evs[i].Seq || ev.Type != evs[i].Type {
			t.Fatalf("event %d was %d %s before the restart and is %d %s after", i, ev.Seq, ev.Type, evs[i].Seq, evs[i].Type)
		}
	}
	var startSeq uint64
	var fin, exited, restarted *wire.Event
	for i := range evs {
		ev := &evs[i]
		switch {
		case ev.Type == wire.EventCommandStarted && ev.Command == r.CommandID:
			startSeq = ev.Seq
		case ev.Type == wire.EventCommandFinished && ev.Command == r.CommandID:
			fin = ev
		case ev.Type == wire.EventSessionExited && ev.Session == s.ID:
			exited = ev
		case ev.Type == wire.EventSessionRestarted && ev.Session == s.ID:
			restarted = ev
		}
	}
	if fin == nil || exited == nil || restarted == nil {
		t.Fatalf("after the restart: finished %v, exited %v, restarted %v", fin, exited, restarted)
	}
	fd := dataOf[wire.CommandFinishedData](t, *fin)
	if fin.Cause != startSeq || fd.Status != wire.StatusLost || fd.Reason != journal.ReasonLimbsdExited || fd.ExitCode != nil || fd.OffsetEnd <= fd.OffsetStart {
		t.Errorf("the cut command's end: cause %d (start %d), %+v", fin.Cause, startSeq, fd)
	}
	if rs := dataOf[wire.SessionData](t, *restarted); rs.Reason != "limbsd restarted" || restarted.Seq < fin.Seq || exited.Seq < fin.Seq {
		t.Errorf("order: finished %d, exited %d, restarted %d (%+v)", fin.Seq, exited.Seq, restarted.Seq, rs)
	}
}

// TestEventsAttachedTerminal: a line a person types on an attached
// terminal is input from the terminal and a command started via attach;
// a password typed there while echo is off is masked.
func TestEventsAttachedTerminal(t *testing.T) {
	d := startDaemon(t, "--token", testToken)
	c := d.client(t, testToken)
	ctx := t.Context()
	s, err := c.CreateSession(ctx, wire.CreateSession{Name: "term"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Attach(ctx, s.ID, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	go func() { _, _ = io.Copy(io.Discard, a) }()
	if _, err := a.Write([]byte("read -s PW; echo done-$PW\r")); err != nil {
		t.Fatal(err)
	}
	eventsUntil(t, c, "the typed command's start", func(ev wire.Event) bool { return ev.Type == wire.EventCommandStarted })
	testbin.Eventually(t, "the password prompt with echo off", 20*time.Second, func() bool {
		y := 5.0
		r, err := c.Wait(ctx, s.ID, wire.Wait{YieldAfter: &y})
		return err == nil && r.WaitingForInput && r.EchoOff
	})
	const secret = "t3rminal-pw"
	if _, err := a.Write([]byte(secret + "\r")); err != nil {
		t.Fatal(err)
	}
	evs := eventsUntil(t, c, "the typed command's end", func(ev wire.Event) bool { return ev.Type == wire.EventCommandFinished })
	var inputs []wire.InputData
	for _, ev := range evs {
		switch ev.Type {
		case wire.EventCommandStarted:
			st := dataOf[wire.CommandStartedData](t, ev)
			if st.Via != "attach" || ev.Source != wire.SourceTerminal {
				t.Errorf("command.started of a line typed on the terminal: %+v (source %s)", st, ev.Source)
			}
		case wire.EventInput:
			if ev.Source != wire.SourceTerminal {
				t.Errorf("input from the terminal has source %s", ev.Source)
			}
			inputs = append(inputs, dataOf[wire.InputData](t, ev))
		}
	}
	if len(inputs) != 2 || inputs[0].Masked || !inputs[1].Masked || strings.Contains(inputs[1].Text, secret) {
		t.Errorf("inputs %+v: want the command line as typed and the password masked", inputs)
	}
}

// TestEventsKill9InFlood: limbsd killed with kill -9 in the middle of a
// flood of output, whose stream file and journal hold different amounts
// of it; after the restart the session's output events still cover its
// stream without an overlap or a hole, and the bytes of the next command
// are the raw output.
func TestEventsKill9InFlood(t *testing.T) {
	d := startDaemon(t, "--token", testToken)
	c := d.client(t, testToken)
	ctx := t.Context()
	s, err := c.CreateSession(ctx, wire.CreateSession{Name: "flood"})
	if err != nil {
		t.Fatal(err)
	}
	y := 0.3
	if _, err := c.Exec(ctx, s.ID, wire.Exec{Command: "while :; do seq 1 100000; done", YieldAfter: &y}); err != nil {
		t.Fatal(err)
	}
	var seen int
	testbin.Eventually(t, "a few MiB of output events", 20*time.Second, func() bool {
		seen = 0
		for _, ev := range allEvents(t, c, false) {
			if ev.Type == wire.EventOutput {
				seen++
			}
		}
		return seen > 40
	})
	_ = d.cmd.Process.Kill()
	<-d.exited

	d2 := startDaemonAt(t, d.dir, testToken, "--token", testToken)
	c2 := d2.client(t, testToken)
	y2 := 20.0
	r, err := c2.Exec(ctx, s.ID, wire.Exec{Command: "echo after-the-restart", YieldAfter: &y2})
	if err != nil || r.Output != "after-the-restart\n" {
		t.Fatalf("exec after the restart: %+v %v", r, err)
	}
	eventsUntil(t, c2, "the command's end", func(ev wire.Event) bool {
		return ev.Type == wire.EventCommandFinished && ev.Command == r.CommandID
	})
	var end int64 = -1
	var tail []byte
	for _, ev := range allEvents(t, c2, true) {
		if ev.Type != wire.EventOutput || ev.Session != s.ID {
			continue
		}
		od := dataOf[wire.OutputData](t, ev)
		if end >= 0 && od.Offset != end {
			t.Fatalf("output event %d covers %d..%d, the one before ended at %d: the events overlap or leave a hole", ev.Seq, od.Offset, od.Offset+od.Size, end)
		}
		end = od.Offset + od.Size
		if od.Offset+od.Size > r.OffsetStart {
			tail = append(tail, od.Bytes...)
			if od.Offset < r.OffsetStart {
				tail = tail[r.OffsetStart-od.Offset:]
			}
		}
	}
	raw, err := readOutput(t, c2, s.ID, r.OffsetStart, r.OffsetEnd)
	if err != nil || len(tail) < len(raw) || !bytes.Equal(tail[:len(raw)], raw) {
		t.Errorf("the next command's bytes in the journal %q differ from its raw output %q (%v)", tail, raw, err)
	}
}

// TestEventsHugeInputBounded: an input call with a million keys (within
// the body bound) is one input event of bounded size, read back whole,
// and the events after it are all there, with no gap.
func TestEventsHugeInputBounded(t *testing.T) {
	d := startDaemon(t, "--token", testToken)
	c := d.client(t, testToken)
	ctx := t.Context()
	s, err := c.CreateSession(ctx, wire.CreateSession{Name: "keys"})
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 1_000_000) // 6 MB of JSON in the event
	for i := range keys {
		keys[i] = "C-a" // beginning of line: harmless at the prompt
	}
	y := 10.0
	if _, err := c.Input(ctx, s.ID, wire.Input{Keys: keys, YieldAfter: &y}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Input(ctx, s.ID, wire.Input{Keys: []string{"C-k"}, Text: "echo after-keys\n", YieldAfter: &y}); err != nil {
		t.Fatal(err)
	}
	evs := eventsUntil(t, c, "the command after the keys ends", func(ev wire.Event) bool { return ev.Type == wire.EventCommandFinished })
	checkSeqs(t, evs)
	for _, ev := range evs {
		switch ev.Type {
		case wire.EventGap:
			t.Errorf("log.gap %s", ev.Data)
		case wire.EventInput:
			if n := len(ev.Data); n > 2*journal.MaxText {
				t.Errorf("input event %d has %d bytes of data; want it bounded like its text (%d)", ev.Seq, n, journal.MaxText)
			}
		}
	}
}

// TestEventsRawPasswordPromptMasked: many password prompts read key by
// key with the terminal in raw mode (ECHO and ICANON clear: bash's read
// -s -n, Node's and Go's prompt libraries behind npm login or gh auth
// login), which the ECHO-clear-ICANON-set rule alone takes for an editor.
// With echo off and a password prompt on the cursor's line, what is typed
// is masked too.
func TestEventsRawPasswordPromptMasked(t *testing.T) {
	d := startDaemon(t, "--token", testToken)
	c := d.client(t, testToken)
	ctx := t.Context()
	s, err := c.CreateSession(ctx, wire.CreateSession{Name: "raw"})
	if err != nil {
		t.Fatal(err)
	}
	y := 5.0
	if _, err := c.Exec(ctx, s.ID, wire.Exec{Command: "read -r -s -n 8 -p 'Password: ' PW; echo; echo len=${#PW}", YieldAfter: &y}); err != nil {
		t.Fatal(err)
	}
	testbin.Eventually(t, "the raw password prompt", 20*time.Second, func() bool {
		sc, err := c.Screen(ctx, s.ID)
		return err == nil && strings.Contains(strings.Join(sc.Lines, "\n"), "Password:")
	})
	const secret = "hunter22"
	r, err := c.Input(ctx, s.ID, wire.Input{Text: secret, YieldAfter: &y})
	if err != nil || !strings.Contains(r.Output, "len=8") {
		t.Fatalf("typing the password: %+v %v", r, err)
	}
	evs := eventsUntil(t, c, "the command's end", func(ev wire.Event) bool { return ev.Type == wire.EventCommandFinished })
	found := false
	for _, ev := range evs {
		if ev.Type != wire.EventInput {
			continue
		}
		found = true
		if in := dataOf[wire.InputData](t, ev); strings.Contains(in.Text, secret) || !in.Masked {
			t.Errorf("the password typed at a raw-mode prompt is in the journal: %+v", in)
		}
	}
	if !found {
		t.Error("no input event")
	}
	// At the shell's prompt (raw too, for readline), under a line that
	// says token, a typed command line is recorded as typed.
	if _, err := c.Exec(ctx, s.ID, wire.Exec{Command: "echo the-token-is-elsewhere", YieldAfter: &y}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Input(ctx, s.ID, wire.Input{Text: "echo typed-token-line\n", YieldAfter: &y}); err != nil {
		t.Fatal(err)
	}
	evs = eventsUntil(t, c, "the typed line's input event", func(ev wire.Event) bool {
		return ev.Type == wire.EventInput && strings.Contains(string(ev.Data), "typed-token-line")
	})
	for _, ev := range evs {
		if ev.Type == wire.EventInput && strings.Contains(string(ev.Data), "typed-token-line") && dataOf[wire.InputData](t, ev).Masked {
			t.Errorf("a command line typed at the prompt is masked: %s", ev.Data)
		}
	}
}

// A follow with batch_ms gets every event, in order, the same as one
// without: the first after a quiet spell, and a burst written together.
// A batch_ms out of range is a 400 that says what to pass.
func TestEventsFollowBatched(t *testing.T) {
	d := startDaemon(t, "--token", testToken)
	c := d.client(t, testToken)
	ctx := t.Context()
	for _, bad := range []string{"-1", "1001", "x", "9223372036855"} {
		resp, err := c.Do(ctx, http.MethodGet, "/events?follow=true&batch_ms="+bad, nil, "")
		if err == nil {
			resp.Body.Close()
			t.Fatalf("batch_ms=%s was taken", bad)
		}
		if !strings.Contains(err.Error(), "use 0 to 1000") {
			t.Errorf("batch_ms=%s: %v", bad, err)
		}
	}
	s, err := c.CreateSession(ctx, wire.CreateSession{Name: "batched"})
	if err != nil {
		t.Fatal(err)
	}
	es, err := c.FollowEventsBatched(ctx, 1, true, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	zero := 0.0
	const commands = 40
	go func() {
		for i := range commands {
			if _, err := c.Exec(context.WithoutCancel(ctx), s.ID, wire.Exec{Command: "echo burst-" + string(rune('a'+i%26)), YieldAfter: &zero}); err != nil {
				t.Errorf("exec: %v", err)
				return
			}
		}
	}()
	var got []wire.Event
	var out []byte
	finished := 0
	deadline := time.AfterFunc(60*time.Second, func() { es.Close() })
	defer deadline.Stop()
	for finished < commands {
		ev, err := es.Next()
		if err != nil {
			t.Fatalf("following after %d commands' ends: %v", finished, err)
		}
		got = append(got, ev)
		switch ev.Type {
		case wire.EventCommandFinished:
			finished++
		case wire.EventOutput:
			out = append(out, dataOf[wire.OutputData](t, ev).Bytes...)
		case wire.EventGap:
			t.Fatalf("a gap: %s", ev.Data)
		}
	}
	checkSeqs(t, got)
	for i := range commands {
		if w := "burst-" + string(rune('a'+i%26)); !bytes.Contains(out, []byte(w)) {
			t.Errorf("the output events lack %q", w)
		}
	}
	// The followed events are the journal's, the same as a plain read.
	all := allEvents(t, c, true)
	if len(all) < len(got) {
		t.Fatalf("the journal has %d events, the follow %d", len(all), len(got))
	}
	for i := range got {
		a, _ := json.Marshal(got[i])
		b, _ := json.Marshal(all[i])
		if !bytes.Equal(a, b) {
			t.Fatalf("event %d followed:\n%s\nread:\n%s", i, a, b)
		}
	}
}

// TestEventsFollowBatchedBacklog: the window of batch_ms spaces the
// writes of a live stream, never those of a backlog: a write that
// reached the size bound (about 1 MiB) goes on at once. A backlog of
// 40,000 events (about 6 MiB) followed with batch_ms=1000 arrives whole
// and in order with at most one wait for the window (after the last
// write, which did not reach the bound), not one a write.
func TestEventsFollowBatchedBacklog(t *testing.T) {
	j, err := journal.Open(journal.Options{Dir: t.TempDir(), RingEvents: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	const events = 40000
	for range events {
		j.Append(wire.Event{Session: "s_1", Type: wire.EventInput, Source: wire.SourceAPI}, wire.InputData{Text: "a line typed into the session, as an agent would"})
	}
	rs := runtime.New(runtime.Options{Token: testToken, Journal: j})
	srv := httptest.NewServer(rs)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/events?from=1&follow=true&batch_ms=1000", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var got []wire.Event
	size := 0
	for len(got) < events && sc.Scan() {
		size += len(sc.Bytes()) + 1
		var ev wire.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Seq == 0 {
			continue // the first line, the journal's
		}
		got = append(got, ev)
	}
	if len(got) < events {
		t.Fatalf("%d of %d backlog events (%v)", len(got), events, sc.Err())
	}
	checkSeqs(t, got)
	if n := runtime.WindowWaits(rs); n > 1 || size < 4<<20 {
		t.Errorf("a backlog of %d bytes waited %d times for the window of batch_ms=1000; want at most once (after its last write)", size, n)
	}
}
