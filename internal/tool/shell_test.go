package tool_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/tool"
)

func startShell(t *testing.T, opts tool.ShellOptions) (*tool.Shell, *client.Client) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs limbsd")
	}
	l := testbin.StartLimbsd(t, false)
	c, err := client.New("unix://"+l.Sock, l.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	return tool.NewShell(c, opts), c
}

// TestReadBackTruncated prints 200,000 lines: the result keeps head and
// tail and names the range left out, and shell_read pages through that
// range so that head + pages + tail are the output, byte for byte.
func TestReadBackTruncated(t *testing.T) {
	sh, _ := startShell(t, tool.ShellOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := sh.Run(ctx, tool.RunInput{Command: "seq 1 200000"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Out.Truncated || len(r.Out.Shown) != 2 {
		t.Fatalf("not truncated into head and tail: %+v", r.Out.Shown)
	}
	gap := r.Out.Shown
	note := fmt.Sprintf("shell_read command=%s from=%d to=%d returns the rest", r.Out.Command, gap[0][1], gap[1][0])
	if !strings.Contains(r.Text, note) {
		t.Errorf("text lacks %q:\n...%s", note, r.Text[len(r.Text)-400:])
	}
	parts := strings.SplitN(r.Out.Output, "\n[... bytes ", 2)
	if len(parts) != 2 {
		t.Fatalf("no gap note in the output")
	}
	head := parts[0] + "\n"
	tail := parts[1][strings.IndexByte(parts[1], '\n')+1:]
	var middle strings.Builder
	from := gap[0][1]
	for pages := 0; from < gap[1][0]; pages++ {
		if pages > 100 {
			t.Fatal("too many pages")
		}
		to := gap[1][0]
		p, err := sh.Read(ctx, tool.ReadInput{Command: r.Out.Command, From: &from, To: &to, MaxOutput: 1 << 20})
		if err != nil || p.IsError {
			t.Fatalf("shell_read from=%d: %v %s", from, err, p.Text)
		}
		if p.Out.From != from {
			t.Fatalf("page starts at %d, asked %d", p.Out.From, from)
		}
		middle.WriteString(p.Out.Output)
		from = p.Out.To
	}
	var want strings.Builder
	for i := 1; i <= 200000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if got := head + middle.String() + tail; got != want.String() {
		t.Errorf("head + shell_read pages + tail differ from seq's output (%d vs %d bytes)", len(got), want.Len())
	}
}

// TestNoRouteInText: the command's own output may hold the very words of
// limbsd's truncation note; the tool neither shows limbsd's note (an HTTP
// route) nor changes the command's text.
func TestNoRouteInText(t *testing.T) {
	sh, _ := startShell(t, tool.ShellOptions{MaxOutput: 4096})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	own := "[... 5 characters omitted; full output: GET /v1/sessions/x/output?from=1&to=2 ...]"
	r, err := sh.Run(ctx, tool.RunInput{Command: "echo '" + own + "'; seq 1 20000; echo '" + own + "'"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Out.Truncated {
		t.Fatal("not truncated")
	}
	if n := strings.Count(r.Text, "GET /v1"); n != 2 || strings.Count(r.Text, own) != 2 {
		t.Errorf("the text holds %d routes, want exactly the command's own 2 lines:\n%s", n, r.Text)
	}
}

// TestSessionsAndWait: a second call on a busy session is refused with
// what to do; shell_wait with commands returns when any of them ends; the
// session tool lists, restarts and closes.
func TestSessionsAndWait(t *testing.T) {
	sh, _ := startShell(t, tool.ShellOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	yield := 0.5
	slow, err := sh.Run(ctx, tool.RunInput{Command: "sleep 30", Yield: &yield})
	if err != nil || slow.Out.Status != "running" {
		t.Fatalf("%v %+v", err, slow.Out)
	}
	busy, err := sh.Run(ctx, tool.RunInput{Command: "echo hi"})
	if err != nil || !busy.IsError || !strings.Contains(busy.Text, "still running command "+slow.Out.Command) {
		t.Fatalf("busy session: %v %s", err, busy.Text)
	}
	cr, err := sh.Session(ctx, tool.SessionInput{Action: "create", Name: "work"})
	if err != nil || cr.IsError {
		t.Fatalf("%v %s", err, cr.Text)
	}
	quick, err := sh.Run(ctx, tool.RunInput{Command: "sleep 1; echo done", Session: "work", Yield: &yield})
	if err != nil || quick.Out.Status != "running" {
		t.Fatalf("%v %+v", err, quick.Out)
	}
	w, err := sh.Wait(ctx, tool.WaitInput{Commands: []string{slow.Out.Command + "x"}})
	if err != nil || !w.IsError {
		t.Fatalf("unknown command: %v %s", err, w.Text)
	}
	// Both are c_1, in two sessions: the default session's is found by
	// id; the other's needs the session.
	ws := quick.Out.Session
	wy := 20.0
	w, err = sh.Wait(ctx, tool.WaitInput{Session: ws, Yield: &wy})
	if err != nil || len(w.Out.Results) != 1 || w.Out.Results[0].Status != "exited" || !strings.Contains(w.Text, "done") {
		t.Fatalf("wait: %v %s", err, w.Text)
	}
	l, err := sh.Session(ctx, tool.SessionInput{Action: "list"})
	if err != nil || !strings.Contains(l.Text, "[default]") || !strings.Contains(l.Text, "work") {
		t.Fatalf("list: %v %s", err, l.Text)
	}
	rs, err := sh.Session(ctx, tool.SessionInput{Action: "restart"})
	if err != nil || rs.IsError {
		t.Fatalf("restart: %v %s", err, rs.Text)
	}
	after, err := sh.Run(ctx, tool.RunInput{Command: "echo after"})
	if err != nil || after.IsError || after.Out.Status != "exited" {
		t.Fatalf("after restart: %v %s", err, after.Text)
	}
	cl, err := sh.Session(ctx, tool.SessionInput{Action: "close", Name: "work"})
	if err != nil || cl.IsError {
		t.Fatalf("close: %v %s", err, cl.Text)
	}
	sc, err := sh.ScreenOf(ctx, tool.ScreenInput{})
	if err != nil || !strings.Contains(sc.Text, "[screen of session") {
		t.Fatalf("screen: %v %s", err, sc.Text)
	}
}

// TestWaitAny waits for two commands in two sessions and returns when the
// quicker ends, with the slower still running.
func TestWaitAny(t *testing.T) {
	sh, _ := startShell(t, tool.ShellOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	yield := 0.2
	a, err := sh.Run(ctx, tool.RunInput{Command: "sleep 30", Yield: &yield})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sh.Session(ctx, tool.SessionInput{Action: "create", Name: "b"}); err != nil {
		t.Fatal(err)
	}
	b, err := sh.Run(ctx, tool.RunInput{Command: "sleep 1; echo b-done", Session: "b", Yield: &yield})
	if err != nil {
		t.Fatal(err)
	}
	wy := 25.0
	w, err := sh.Wait(ctx, tool.WaitInput{Commands: []string{a.Out.Command, "b:" + b.Out.Command}, Yield: &wy})
	if err != nil || len(w.Out.Results) != 2 {
		t.Fatalf("%v %s", err, w.Text)
	}
	if w.Out.Results[0].Status != "running" || w.Out.Results[1].Status != "exited" || !strings.Contains(w.Text, "b-done") {
		t.Errorf("mode any: %+v\n%s", w.Out.Results, w.Text)
	}
}
