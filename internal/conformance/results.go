package conformance

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

// testResults: results say what a terminal shows. A \r progress bar spread
// over several running results renders as a terminal would (overwrite), a
// full-screen program gives its screen (alt_screen), a running command's
// cwd is its own, and a truncated output is cut at whole lines with a note
// naming a path that works for this client.
func testResults(t *testing.T, c *client.Client) {
	t.Run("CarriageReturnAcrossResults", func(t *testing.T) {
		id := newSession(t, c)
		r := runReq(t, c, id, wire.Exec{
			Command:    `for i in 1 2 3 4 5 6; do printf '\rstep %d/6' $i; sleep 0.3; done; echo`,
			YieldAfter: ptr(0.4),
		})
		var text string
		chunks := 0
		for {
			text = render(text, r)
			chunks++
			if r.Status != wire.StatusRunning || chunks > 200 {
				break
			}
			var err error
			r, err = c.Wait(t.Context(), id, wire.Wait{YieldAfter: ptr(0.4)})
			if err != nil {
				t.Fatal(err)
			}
		}
		wantExit(t, r, 0)
		if text != "step 6/6\n" {
			t.Errorf("the results, rendered as a terminal would (overwrite replaces the unfinished last line), give %q over %d results, want %q", text, chunks, "step 6/6\n")
		}
	})

	t.Run("AltScreen", func(t *testing.T) {
		id := newSession(t, c)
		// What vim does: the alternate screen, cleared, rows of ~.
		draw := `printf '\033[?1049h\033[H\033[2J'; for i in $(seq 20); do printf '~%78s\r\n' ''; done; printf '\033[1;3Hfull screen'`
		r := runReq(t, c, id, wire.Exec{Command: draw + `; sleep 30`, YieldAfter: ptr(1.5)})
		if r.Status != wire.StatusRunning {
			t.Fatalf("status %q, want running", r.Status)
		}
		if !r.AltScreen || !strings.Contains(r.Output, "full screen") || len(r.Output) > 400 {
			t.Errorf("running full-screen program: alt_screen %v, output %q (%d bytes); want alt_screen true and the screen's text", r.AltScreen, r.Output, len(r.Output))
		}
		stop(t, c, id)
		r = run(t, c, id, draw+`; printf '\033[?1049l'; echo back`)
		wantExit(t, r, 0)
		if r.Output != "back\n" || r.AltScreen {
			t.Errorf("after leaving the alternate screen: output %q, alt_screen %v; want %q (what was drawn there is gone, as on a terminal)", r.Output, r.AltScreen, "back\n")
		}
	})

	t.Run("RunningCwd", func(t *testing.T) {
		id := newSession(t, c)
		r := runReq(t, c, id, wire.Exec{Command: `sh -c 'cd / && echo in && exec sleep 30'`, YieldAfter: ptr(1.5)})
		if r.Status != wire.StatusRunning || r.Cwd != "/" {
			t.Errorf("running command in /: status %q, cwd %q; want running in %q (its own cwd, not the shell's)", r.Status, r.Cwd, "/")
		}
		stop(t, c, id)
	})

	t.Run("TruncationAtLines", func(t *testing.T) {
		id := newSession(t, c)
		// The command prints the note's own words first: they stay its.
		own := "[... 5 characters omitted ...]"
		r := runReq(t, c, id, wire.Exec{Command: `echo '` + own + `'; seq 1 3000`, YieldAfter: ptr(guardYield), MaxOutput: ptr(1000)})
		wantExit(t, r, 0)
		if !r.Truncated {
			t.Fatalf("not truncated: %d bytes", len(r.Output))
		}
		lines := strings.Split(strings.TrimSuffix(r.Output, "\n"), "\n")
		if lines[0] != own {
			t.Errorf("the command's first line %q became %q: the note rewrote the command's own output", own, lines[0])
		}
		notes := 0
		var path string
		for _, l := range lines[1:] {
			if m := notePath.FindStringSubmatch(l); m != nil {
				notes++
				path = m[1]
				continue
			}
			if !regexp.MustCompile(`^[0-9]+$`).MatchString(l) {
				t.Errorf("line %q is cut: truncation must cut at line boundaries (output %q)", l, r.Output)
			}
		}
		if notes != 1 {
			t.Fatalf("%d notes naming the full output in %q, want 1", notes, r.Output)
		}
		full := strings.ReplaceAll(getPath(t, c, path), "\r\n", "\n") // raw: the terminal's line ends
		if !strings.HasPrefix(full, own+"\n1\n2\n") || !strings.HasSuffix(full, "2999\n3000\n") {
			t.Errorf("GET %s (the note's path) gave %d bytes not holding the whole output", path, len(full))
		}
	})
}

var notePath = regexp.MustCompile(`^\[\.\.\. [0-9]+ characters omitted; full output: GET (\S+) \.\.\.\]$`)

// render folds result r into the text a terminal shows so far.
func render(text string, r wire.Result) string {
	if r.Overwrite {
		text = text[:strings.LastIndexByte(text, '\n')+1]
	}
	return text + r.Output
}

// stop interrupts the running command of session id.
func stop(t *testing.T, c *client.Client, id string) {
	t.Helper()
	if _, err := c.Interrupt(t.Context(), id, wire.Interrupt{}); err != nil {
		t.Errorf("interrupt: %v", err)
	}
}

// getPath GETs an absolute API path (as a note names it) from the host of
// c's base, with c's token.
func getPath(t *testing.T, c *client.Client, path string) string {
	t.Helper()
	u, err := url.Parse(c.Base())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", u.Scheme+"://"+u.Host+path, nil)
	if err != nil {
		t.Fatalf("the note's path %q: %v", path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token())
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s (the path the truncation note names): %d %s", path, resp.StatusCode, b)
	}
	return string(b)
}
