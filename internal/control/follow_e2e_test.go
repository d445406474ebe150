package control_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/provider/local"
	"github.com/limbs-dev/limbs/internal/store"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// The follower of limbsd's journal, through a real `limbs serve`
// (docs/events.md, "The follower"): issue 13's acceptance 1 and 2.

// logOf reads a sandbox's whole event log from limbs serve, page by page.
func logOf(t *testing.T, ctl *client.Client, sb string) []wire.Event {
	t.Helper()
	var all []wire.Event
	from := uint64(1)
	for range 10_000 {
		l, err := ctl.Sandboxes().Events(context.Background(), sb, client.EventsQuery{From: from})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Events) == 0 {
			return all
		}
		all = append(all, l.Events...)
		from = l.Events[len(l.Events)-1].Seq + 1
	}
	t.Fatal("the log never ended")
	return nil
}

// checkSeqs fails unless evs are numbered 1, 2, 3, ... with no gap and
// nothing twice.
func checkSeqs(t *testing.T, evs []wire.Event) {
	t.Helper()
	for i, ev := range evs {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d (%s): want %d, no gap and nothing twice", i, ev.Seq, ev.Type, i+1)
		}
	}
}

// sessionOutput is a session's output stream as the log's output events
// hold it, from offset 0, checked to have no hole and no overlap.
func sessionOutput(t *testing.T, evs []wire.Event, session string) []byte {
	t.Helper()
	var out []byte
	for _, ev := range evs {
		if ev.Type != wire.EventOutput || ev.Session != session {
			continue
		}
		var d wire.OutputData
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatalf("output event %d: %v", ev.Seq, err)
		}
		if d.Offset != int64(len(out)) || int64(len(d.Bytes)) != d.Size {
			t.Fatalf("output event %d of session %s covers [%d, +%d) with %d bytes; the log held %d bytes before it: a hole, an overlap or missing bytes", ev.Seq, session, d.Offset, d.Size, len(d.Bytes), len(out))
		}
		out = append(out, d.Bytes...)
	}
	return out
}

// rawOutput is limbsd's raw output stream of a session, [from, to),
// through limbs serve.
func rawOutput(t *testing.T, c *client.Client, session string, from, to int64) []byte {
	t.Helper()
	rc, err := c.Output(context.Background(), session, from, to)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func finished(ev wire.Event) wire.CommandFinishedData {
	var d wire.CommandFinishedData
	_ = json.Unmarshal(ev.Data, &d)
	return d
}

// Acceptance 2: a follower of GET /v1/sandboxes/{id}/events?follow=true
// that hangs up and follows again from its last seq + 1, ten times while
// a chatty command runs, gets every event once, and the output events'
// bytes are the session's raw output.
func TestFollowJournalReconnects(t *testing.T) {
	dir := stateDir(t)
	removeAll(t, dir)
	addr := freeAddr(t)
	startServe(t, addr, "--state-dir", dir, "--provider", "local")
	ctl, _ := client.New(addr, e2eToken, "")
	ctx := context.Background()
	sb, err := ctl.Sandboxes().Create(ctx, wire.CreateSandbox{Name: "chatty"})
	if err != nil {
		t.Fatal(err)
	}
	c := ctl.Sandbox(sb.ID)
	main, err := c.CreateSession(ctx, wire.CreateSession{Name: "main"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSession(ctx, wire.CreateSession{Name: "ctl"}); err != nil {
		t.Fatal(err)
	}
	// Chatty until the test says stop (bounded either way).
	yield := 0.2
	first, err := c.Exec(ctx, "main", wire.Exec{
		Command:    `rm -f stop.flag; i=0; while [ ! -e stop.flag ] && [ $i -lt 200000 ]; do i=$((i+1)); echo "chatty $i $RANDOM$RANDOM$RANDOM"; [ $((i % 20)) = 0 ] && sleep 0.01; done; echo "stopped after $i"`,
		YieldAfter: &yield,
	})
	if err != nil || first.Status != wire.StatusRunning {
		t.Fatalf("the chatty command: %+v, %v", first, err)
	}

	var got []wire.Event
	next := uint64(1)
	follow := func(stop func(n int, ev wire.Event) bool) {
		fctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		errStop := errors.New("hang up")
		n := 0
		err := ctl.Sandboxes().FollowEvents(fctx, sb.ID, client.EventsQuery{From: next}, func(ev wire.Event) error {
			got = append(got, ev)
			next = ev.Seq + 1
			n++
			if stop(n, ev) {
				return errStop
			}
			return nil
		})
		if !errors.Is(err, errStop) {
			t.Fatalf("following from %d: %v", next, err)
		}
	}
	// Ten hang-ups mid-command, each after a few of the command's output
	// events, some in the middle of what limbs serve had sent.
	for i := range 10 {
		follow(func(n int, ev wire.Event) bool { return n >= 3+i*7 && ev.Type == wire.EventOutput })
	}
	if r := exec1(t, c, "ctl", "touch stop.flag"); r.Status != wire.StatusExited {
		t.Fatalf("touch: %+v", r)
	}
	// Follow once more, to the command's end.
	follow(func(_ int, ev wire.Event) bool {
		return ev.Type == wire.EventCommandFinished && ev.Session == main.ID && ev.Command == first.CommandID
	})
	for _, ev := range got {
		if ev.Type == wire.EventCommandFinished && ev.Session == main.ID && ev.Command == first.CommandID && ev.Seq < got[len(got)-1].Seq {
			t.Fatalf("the chatty command ended before the last hang-up")
		}
	}

	checkSeqs(t, got)
	all := logOf(t, ctl, sb.ID)
	if len(all) < len(got) {
		t.Fatalf("the log has %d events, the follower got %d", len(all), len(got))
	}
	for i := range got {
		if a, b := got[i], all[i]; a.Seq != b.Seq || a.Type != b.Type || !bytes.Equal(a.Data, b.Data) {
			t.Fatalf("followed event %d differs from the log's: %+v vs %+v", i, a, b)
		}
	}
	fin := finished(got[len(got)-1])
	out := sessionOutput(t, got, main.ID)
	if int64(len(out)) < fin.OffsetEnd {
		t.Fatalf("the followed output events hold %d bytes, the command ended at %d", len(out), fin.OffsetEnd)
	}
	raw := rawOutput(t, c, "main", 0, int64(len(out)))
	if !bytes.Equal(out, raw) {
		t.Fatalf("the followed output (%d bytes) differs from the session's raw output (%d bytes)", len(out), len(raw))
	}
	if !bytes.Contains(out[fin.OffsetStart:fin.OffsetEnd], []byte("stopped after ")) || fin.Status != wire.StatusExited {
		t.Errorf("the command's end: %+v", fin)
	}
	t.Logf("%d events, %d output bytes, followed with 10 hang-ups", len(got), len(out))
}

// tokCommand is command i of phase ph: it prints one line that names it
// (the format keeps the name out of the typed text, so an echo of the
// line is never taken for its output) and exits with i % 4.
func tokCommand(ph string, i int) string {
	return fmt.Sprintf(`printf 'tok-%%s-%%03d\tü%%s\n' %s %d $((%d * 7919)); (exit %d)`, ph, i, i, i%4)
}

// tokOutput is what tokCommand prints, as the terminal shows it.
func tokOutput(ph string, i int) string {
	return fmt.Sprintf("tok-%s-%03d\tü%d\r\n", ph, i, i*7919)
}

var tokRE = regexp.MustCompile(`tok-([A-Z])-([0-9]{3})`)

// Acceptance 1: 100 commands in a Docker sandbox (--network none): 40
// through exec, 30 typed over attach by a client that leaves at once (no
// one waits for them), 20 typed ahead through input and run while limbs
// serve is dead (it is killed with kill -9 after typing them: no client,
// and no follower, is connected while they run), then limbsd is killed
// with SIGKILL in the middle of a command (the container dies and is
// recovered), then 10 more through exec. The sandbox's log then holds
// every command with its exit code and its output byte-exact, in order,
// with no gap in seq, and the command cut by limbsd's death as lost.
func TestFollowJournalAcceptance(t *testing.T) {
	var instance string
	dockerOrSkip(t, "")
	cleanDocker(t, &instance)
	dir := stateDir(t)
	removeAll(t, dir)
	addr := freeAddr(t)
	args := []string{"--state-dir", dir, "--provider", "docker"}
	sp := startServe(t, addr, args...)
	ctl, _ := client.New(addr, e2eToken, "")
	ctx := context.Background()
	sb, err := ctl.Sandboxes().Create(ctx, wire.CreateSandbox{Name: "acc"})
	if err != nil {
		t.Fatal(err)
	}
	c := ctl.Sandbox(sb.ID)
	sess := map[string]string{} // name -> id
	names := []string{"ex", "tty"}
	for i := range 20 {
		names = append(names, fmt.Sprintf("c%02d", i))
	}
	for _, name := range names {
		s, err := c.CreateSession(ctx, wire.CreateSession{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		sess[name] = s.ID
	}
	want := map[string]int{} // token -> exit code
	sessionOf := func(ph string, i int) string {
		switch ph {
		case "B":
			return sess["tty"]
		case "C":
			return sess[fmt.Sprintf("c%02d", i)]
		}
		return sess["ex"]
	}
	endedIn := func(session string) int {
		n := 0
		for _, ev := range logOf(t, ctl, sb.ID) {
			if ev.Type == wire.EventCommandFinished && ev.Session == session {
				n++
			}
		}
		return n
	}

	// A: 40 through exec.
	for i := range 40 {
		r := exec1(t, c, "ex", tokCommand("A", i))
		if r.ExitCode == nil || *r.ExitCode != i%4 {
			t.Fatalf("exec %d: %+v", i, r)
		}
		want[fmt.Sprintf("A-%03d", i)] = i % 4
	}
	// B: 30 typed over attach, each at the prompt after the previous
	// one ended (limbsd marks one command per line typed at a prompt),
	// by a client that reads nothing and waits for no result: the test
	// learns of each end from the log only. Then it hangs up.
	a, err := c.Attach(ctx, "tty", -1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if _, err := a.Write([]byte(tokCommand("B", i) + "\r")); err != nil {
			t.Fatal(err)
		}
		want[fmt.Sprintf("B-%03d", i)] = i % 4
		testbin.Eventually(t, fmt.Sprintf("typed command %d in the log", i), time.Minute, func() bool {
			return endedIn(sess["tty"]) == i+1
		})
	}
	a.Close()
	// C: 20 commands, one per session, started through exec by a client
	// that does not wait for them (it leaves at the first yield), and
	// limbs serve is killed with kill -9 while they run: they end while
	// no client, nor limbs serve, is connected to limbsd.
	y := 0.05
	for i := range 20 {
		r, err := c.Exec(ctx, fmt.Sprintf("c%02d", i), wire.Exec{Command: "sleep 1; " + tokCommand("C", i), YieldAfter: &y})
		if err != nil || r.Status != wire.StatusRunning {
			t.Fatalf("exec C %d: %+v, %v", i, r, err)
		}
		want[fmt.Sprintf("C-%03d", i)] = i % 4
	}
	sp.kill()
	killedAt := time.Now()
	db, err := store.Open(filepath.Join(dir, "limbs.db"))
	if err != nil {
		t.Fatal(err)
	}
	instance = db.Instance()
	db.Close()
	time.Sleep(3 * time.Second) // the commands of C end with no limbs serve
	restartedAt := time.Now()
	startServe(t, addr, args...)

	// The command limbsd's death cuts.
	yield := 0.5
	cut, err := c.Exec(ctx, "ex", wire.Exec{Command: "printf 'cut-start\\n'; sleep 60", YieldAfter: &yield})
	if err != nil || cut.Status != wire.StatusRunning {
		t.Fatalf("the command to cut: %+v, %v", cut, err)
	}
	if out, err := exec.Command("docker", "kill", "--signal", "KILL", "limbs-"+sb.ID).CombinedOutput(); err != nil {
		t.Fatalf("docker kill: %v: %s", err, out)
	}
	testbin.Eventually(t, "the sandbox recovered", 2*time.Minute, func() bool {
		got, err := ctl.Sandboxes().Get(ctx, sb.ID)
		return err == nil && got.Status == wire.SandboxRunning && got.Reason != ""
	})
	// D: 10 more through exec, in the restored session.
	for i := range 10 {
		r := exec1(t, c, "ex", tokCommand("D", i))
		if r.ExitCode == nil || *r.ExitCode != i%4 {
			t.Fatalf("exec D %d: %+v", i, r)
		}
		want[fmt.Sprintf("D-%03d", i)] = i % 4
	}

	// Every command's end in the log (the follower is asynchronous).
	var all []wire.Event
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		all = logOf(t, ctl, sb.ID)
		n := 0
		for _, ev := range all {
			if ev.Type == wire.EventCommandFinished {
				n++
			}
		}
		if n >= 100+1 { // and the cut one
			break
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, ev := range all {
				if ev.Type != wire.EventOutput {
					fmt.Fprintf(&b, "%d %s %s/%s %s\n", ev.Seq, ev.Type, ev.Session, ev.Command, ev.Data)
				}
			}
			t.Errorf("only %d commands ended in the log within 2 minutes; its events but output:\n%s", n, b.String())
			break
		}
	}
	checkSeqs(t, all)
	outs := map[string][]byte{}
	for _, id := range sess {
		outs[id] = sessionOutput(t, all, id)
	}
	started := map[uint64]wire.Event{}
	byID := map[string]wire.Event{}
	seen := map[string]bool{}
	last := map[string]string{} // session -> last token seen
	var lost []wire.Event
	inGap := 0
	for _, ev := range all {
		switch ev.Type {
		case wire.EventGap:
			t.Errorf("a gap in the log: %s", ev.Data)
		case wire.EventCommandStarted:
			started[ev.Seq] = ev
			byID[ev.Session+"/"+ev.Command] = ev
		case wire.EventCommandFinished:
			d := finished(ev)
			st, ok := started[ev.Cause]
			if ev.Cause == 0 {
				// A restarted limbs serve knows the journal's causes of
				// what it ingested itself only (docs/events.md): the
				// command's start is then the one of its session and id.
				// (Its end may predate the kill yet have been ingested
				// after the restart, the follower being behind.)
				st, ok = byID[ev.Session+"/"+ev.Command]
			}
			if !ok || st.Command != ev.Command || st.Session != ev.Session {
				t.Errorf("command.finished %d names cause %d, not its start", ev.Seq, ev.Cause)
			}
			if d.Status == wire.StatusLost {
				lost = append(lost, ev)
				continue
			}
			out := outs[ev.Session]
			if d.OffsetEnd > int64(len(out)) || d.OffsetStart > d.OffsetEnd {
				t.Errorf("command %s/%s: range [%d, %d) past the log's %d bytes", ev.Session, ev.Command, d.OffsetStart, d.OffsetEnd, len(out))
				continue
			}
			rng := out[d.OffsetStart:d.OffsetEnd]
			m := tokRE.FindAllSubmatch(rng, -1)
			if len(m) == 0 {
				t.Errorf("command %s/%s printed %q, no token", ev.Session, ev.Command, rng)
				continue
			}
			ph, num := string(m[0][1]), string(m[0][2])
			tok := ph + "-" + num
			i, _ := strconv.Atoi(num)
			if len(m) != 1 || string(rng) != tokOutput(ph, i) {
				t.Errorf("command %s: its output in the log is %q, want %q", tok, rng, tokOutput(ph, i))
			}
			if sessionOf(ph, i) != ev.Session {
				t.Errorf("command %s in session %s, want %s", tok, ev.Session, sessionOf(ph, i))
			}
			if code, ok := want[tok]; !ok || d.ExitCode == nil || *d.ExitCode != code {
				t.Errorf("command %s: exit code %v, want %d", tok, d.ExitCode, code)
			}
			if seen[tok] {
				t.Errorf("command %s twice in the log", tok)
			}
			if tok <= last[ev.Session] {
				t.Errorf("command %s after %s: out of order", tok, last[ev.Session])
			}
			seen[tok], last[ev.Session] = true, tok
			if ph == "C" && ev.Time.After(killedAt) && ev.Time.Before(restartedAt) {
				inGap++
			}
		}
	}
	for tok := range want {
		if !seen[tok] {
			t.Errorf("command %s is not in the log", tok)
		}
	}
	if inGap == 0 {
		t.Errorf("no command of C ended while limbs serve was dead: the test did not test it")
	}
	if len(lost) != 1 {
		t.Fatalf("%d lost commands in the log, want the cut one: %v", len(lost), lost)
	}
	d := finished(lost[0])
	if lost[0].Command != cut.CommandID || lost[0].Session != sess["ex"] || !strings.Contains(d.Reason, "limbsd exited") || d.ExitCode != nil {
		t.Errorf("the cut command's end: %+v %+v", lost[0], d)
	}
	if !bytes.Contains(outs[sess["ex"]][d.OffsetStart:d.OffsetEnd], []byte("cut-start")) {
		t.Errorf("the cut command's output lacks what it printed: %q", outs[sess["ex"]][d.OffsetStart:d.OffsetEnd])
	}
	t.Logf("%d events; %d commands of C ended while limbs serve was dead", len(all), inGap)
	if err := ctl.Sandboxes().Remove(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if left := dockerLeftovers(t, instance); len(left) > 0 {
		t.Errorf("containers/volumes left: %v", left)
	}
}

// A limbsd whose journal was lost (its state wiped while the sandbox was
// stopped) has a new journal id: the follower records a log.gap naming
// both, keeps the old events and follows the new journal from its seq 1.
func TestFollowJournalChanged(t *testing.T) {
	dir := stateDir(t)
	removeAll(t, dir)
	p := newPlane(t, dir, local.IsolateAuto, nil)
	ctx := context.Background()
	sb := p.create(t, wire.CreateSandbox{})
	c := p.sandboxClient(t, sb.ID)
	if _, err := c.CreateSession(ctx, wire.CreateSession{Name: "main"}); err != nil {
		t.Fatal(err)
	}
	exec1(t, c, "main", "echo before")
	ended := func(want int) []wire.Event {
		var all []wire.Event
		testbin.Eventually(t, fmt.Sprintf("%d commands in the log", want), time.Minute, func() bool {
			all = logOf(t, p.c, sb.ID)
			n := 0
			for _, ev := range all {
				if ev.Type == wire.EventCommandFinished {
					n++
				}
			}
			return n >= want
		})
		return all
	}
	ended(1)
	if _, err := p.c.Sandboxes().Stop(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "sandboxes", sb.ID, "state", "journal")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.c.Sandboxes().Start(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSession(ctx, "main"); err != nil {
		if _, err := c.CreateSession(ctx, wire.CreateSession{Name: "main"}); err != nil {
			t.Fatal(err)
		}
	}
	exec1(t, c, "main", "echo after")
	all := ended(2)
	checkSeqs(t, all)
	var gaps, texts []string
	for _, ev := range all {
		switch ev.Type {
		case wire.EventGap:
			var d wire.GapData
			_ = json.Unmarshal(ev.Data, &d)
			gaps = append(gaps, d.Reason)
		case wire.EventCommandStarted:
			var d wire.CommandStartedData
			_ = json.Unmarshal(ev.Data, &d)
			texts = append(texts, d.Text)
		}
	}
	if len(gaps) != 1 || !strings.Contains(gaps[0], "journal is now j_") {
		t.Errorf("log.gap reasons %q, want one for the changed journal", gaps)
	}
	if strings.Join(texts, "|") != "echo before|echo after" {
		t.Errorf("the commands in the log: %q", texts)
	}
}
