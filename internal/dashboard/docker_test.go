package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/dashboard"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

// freePort returns a TCP port on 127.0.0.1 nothing listens on now.
func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startServe runs a real `limbs serve` (built from this module) on
// 127.0.0.1 with the docker provider and returns its base URL.
func startServe(t *testing.T, token string) string {
	t.Helper()
	limbsd := testbin.Path(t, "limbsd", false)
	limbs := testbin.Path(t, "limbs", false)
	state, err := os.MkdirTemp("", "dash") // short: socket paths
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	var logs testbin.Buffer
	cmd := exec.Command(limbs, "serve", "--listen", addr, "--state-dir", state, "--token", token,
		"--provider", "docker", "--limbsd", limbsd)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		os.RemoveAll(state)
		if t.Failed() {
			t.Logf("limbs serve's log:\n%s", logs.String())
		}
	})
	base := "http://" + addr
	testbin.Eventually(t, "limbs serve answering", 30*time.Second, func() bool {
		resp, err := http.Get(base + "/v1/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return base
}

func needDocker(t *testing.T) {
	if _, err := exec.LookPath("docker"); err != nil {
		testbin.NoDocker(t, "no docker CLI on PATH")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "image", "inspect", "limbs/base:latest").CombinedOutput(); err != nil {
		testbin.NoDocker(t, "no image limbs/base:latest ("+strings.TrimSpace(string(out))+")")
	}
}

// TestDashboardDocker is the dashboard's acceptance in a real headless
// Chromium against a real limbs serve with a real Docker sandbox: a wrong
// token is refused; the right one logs in; the overview lists the
// sandbox; its live terminal takes `echo hello` and shows hello; the
// timeline has the command with exit code 0 and opens its output; the
// session replays. A cross-origin POST and a cross-origin WebSocket with
// the session cookie are refused, bearer clients are not affected, and no
// request of the browser goes to another origin. Screenshots of each
// step go to $LIMBS_SCREENSHOTS (default: a temporary directory).
// secretValue is a secret env value of the test's sandbox.
const secretValue = "sk-dash-secret-0123456789abcdef"

func TestDashboardDocker(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the browser test takes a minute")
	}
	needDocker(t)
	const token = "dash-e2e-token-0123456789"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := newBrowser(t, ctx)
	base := startServe(t, token)

	c, err := client.New(base, token, "")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Sandboxes().Create(ctx, wire.CreateSandbox{Name: "dash-e2e", Provider: "docker", Network: wire.NetworkNone,
		Env: map[string]string{"API_KEY": secretValue}, SecretEnv: []string{"API_KEY"}})
	if err != nil {
		t.Fatalf("creating a Docker sandbox: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Sandboxes().Remove(ctx, sb.ID); err != nil {
			t.Logf("removing %s: %v", sb.ID, err)
		}
	})

	// 1. A wrong token is refused.
	b.login(base, "not-the-token")
	b.run("the refusal", 20*time.Second, chromedp.WaitVisible(chromedp.CSS(`#login-error`)))
	if got := b.text("#login-error"); !strings.Contains(got, "Wrong token") {
		t.Errorf("login error %q", got)
	}
	b.shot("login-refused")

	// 2. The right token logs in; the overview lists the sandbox.
	b.login(base, token)
	b.waitJS("the overview", `document.body.dataset.ready === "overview"`, 30*time.Second)
	row := `.trow[data-name="dash-e2e"]`
	b.run("the sandbox's row", 20*time.Second, chromedp.WaitVisible(chromedp.CSS(row)))
	if got := b.text(row); !strings.Contains(got, "running") || !strings.Contains(got, "limbs/base") {
		t.Errorf("overview row %q: want running and the image", got)
	}
	b.shot("overview")
	checkStats(t, base, token, sb.ID)

	// 3. Its live terminal: type echo hello, see hello.
	b.run("opening the sandbox", 20*time.Second, chromedp.Click(chromedp.CSS(row)))
	b.waitJS("the terminal attached", `(document.querySelector("#term-state")||{}).textContent?.includes("attached")`, 40*time.Second)
	b.run("typing", 20*time.Second,
		chromedp.Focus(chromedp.CSS(`#terminal .xterm-helper-textarea`)),
		typeText("echo hello"),
		pressEnter(),
	)
	// The echo of the line and the output line: hello on a line of its own.
	helloShown := `[...document.querySelectorAll("#terminal .xterm-rows > div")].some(d => d.textContent.trim() === "hello")`
	b.waitJS("hello in the terminal", helloShown, 30*time.Second)
	// A secret printed on the terminal is masked there too.
	b.run("printing the secret", 20*time.Second, typeText("echo $API_KEY"), pressEnter())
	b.waitJS("the masked secret", `[...document.querySelectorAll("#terminal .xterm-rows > div")].some(d => d.textContent.trim() === "***")`, 30*time.Second)
	if got := evalIn[string](b, "the terminal's text", `document.querySelector("#terminal .xterm-rows").textContent`); strings.Contains(got, secretValue) || strings.Contains(got, secretValue[:12]) {
		t.Errorf("the terminal shows the secret value: %q", got)
	}
	b.shot("terminal")

	// 4. The timeline has the command with exit code 0; its output.
	b.run("the timeline", 10*time.Second, chromedp.Click(chromedp.CSS(`#tab-timeline`)))
	okRow := `#timeline tr[data-exit="0"]:last-child`
	b.waitJS("a command with exit 0", `!!document.querySelector(`+jsString(okRow)+`)`, 40*time.Second)
	if got := b.text(okRow + " td.exit"); !strings.Contains(got, "0") {
		t.Errorf("timeline exit cell %q", got)
	}
	b.run("opening its output", 10*time.Second, chromedp.Click(chromedp.CSS(okRow)))
	b.waitJS("the command's output", `(document.querySelector("#command-output")||{}).textContent?.includes("hello")`, 20*time.Second)
	b.shot("timeline")

	// 5. Replay the session.
	b.run("the terminal tab", 10*time.Second, chromedp.Click(chromedp.CSS(`#tab-terminal`)))
	b.run("the replay", 20*time.Second, chromedp.Click(chromedp.CSS(`#replay-link`)))
	b.waitJS("the replay page", `document.body.dataset.ready === "replay"`, 30*time.Second)
	b.run("playing fast", 10*time.Second,
		chromedp.SetValue(chromedp.CSS(`#speed`), "16"),
		chromedp.Click(chromedp.CSS(`#play`)),
	)
	b.waitJS("the replay's end", `document.body.dataset.replay === "ended"`, 60*time.Second)
	b.waitJS("hello in the replay", `[...document.querySelectorAll("#replay-term .xterm-rows > div")].some(d => d.textContent.trim() === "hello")`, 10*time.Second)
	b.shot("replay")

	// The asciicast download holds the session's output.
	hc, _ := b.cookieClient(base)
	castHref := evalIn[string](b, "the asciicast link", `document.querySelector("#cast-link").getAttribute("href")`)
	resp, err := hc.Get(base + castHref)
	if err != nil {
		t.Fatal(err)
	}
	castBody, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.HasPrefix(castBody, []byte(`{"version":2`)) || !bytes.Contains(castBody, []byte("hello")) {
		t.Errorf("asciicast download: %s %.300q", resp.Status, castBody)
	}

	// 6. Cross-origin requests with the session cookie are refused.
	checkCrossOrigin(t, hc, base, sb.ID)

	// 7. No request went to another origin.
	b.checkSameOrigin(base)
}

// checkCrossOrigin: with the dashboard's session cookie, a POST from a
// foreign Origin and one without the CSRF header are 403; a WebSocket
// from a foreign Origin is refused while the same one from the
// dashboard's origin opens; a bearer client with any Origin still works.
func checkCrossOrigin(t *testing.T, hc *http.Client, base, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var sess struct {
		CSRF string `json:"csrf"`
	}
	resp, err := hc.Get(base + "/ui/session")
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&sess)
	resp.Body.Close()
	if sess.CSRF == "" {
		t.Fatal("no CSRF token from /ui/session")
	}
	post := func(origin, csrf string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/sandboxes/"+id+"/stop", strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if csrf != "" {
			req.Header.Set(dashboard.CSRFHeader, csrf)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("http://evil.example", sess.CSRF); code != http.StatusForbidden {
		t.Errorf("cross-origin POST with the cookie and the CSRF token: %d, want 403", code)
	}
	if code := post(base, ""); code != http.StatusForbidden {
		t.Errorf("same-origin POST with the cookie but no CSRF header: %d, want 403", code)
	}
	if code := post(base, "wrong"); code != http.StatusForbidden {
		t.Errorf("same-origin POST with a wrong CSRF header: %d, want 403", code)
	}
	sessions, err := hc.Get(base + "/v1/sandboxes/" + id + "/sessions")
	if err != nil {
		t.Fatal(err)
	}
	var list wire.SessionList
	_ = json.NewDecoder(sessions.Body).Decode(&list)
	sessions.Body.Close()
	if len(list.Sessions) == 0 {
		t.Fatalf("no session listed through the cookie: %s", sessions.Status)
	}
	wsURL := "ws" + strings.TrimPrefix(base, "http") + "/v1/sandboxes/" + id + "/sessions/" + list.Sessions[0].ID + "/attach"
	dial := func(origin string) (*http.Response, error) {
		h := http.Header{"Origin": {origin}}
		conn, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: hc, HTTPHeader: h})
		if err == nil {
			conn.CloseNow()
		}
		return resp, err
	}
	if resp, err := dial("http://evil.example"); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin WebSocket with the cookie: %v, %v; want refused with 403", statusOf(resp), err)
	}
	if _, err := dial(base); err != nil {
		t.Errorf("same-origin WebSocket with the cookie: %v (the refusal above must be the Origin's)", err)
	}
	// The bearer API is what it was: any Origin, no cookie needed.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/sandboxes", nil)
	req.Header.Set("Authorization", "Bearer dash-e2e-token-0123456789")
	req.Header.Set("Origin", "http://evil.example")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("bearer client with a foreign Origin: %s, want 200 as before the dashboard", resp.Status)
	}
	// Without the cookie nothing of the dashboard's answers.
	resp, err = http.Get(base + "/ui/overview")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/ui/overview without a session: %s, want 401", resp.Status)
	}
}

// typeText types s into the focused element as a keyboard layout would
// (Input.insertText: one input event, as xterm.js reads typed text).
func typeText(s string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, input.InsertText, input.InsertTextParams{Text: s})
		return err
	})
}

// pressEnter presses and releases the Enter key.
func pressEnter() chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeRawKeyDown, input.DispatchKeyEventTypeKeyUp} {
			if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, input.DispatchKeyEventParams{
				Type: typ, Key: "Enter", Code: "Enter", WindowsVirtualKeyCode: 13, NativeVirtualKeyCode: 13,
			}); err != nil {
				return err
			}
		}
		return nil
	})
}

// checkStats: GET /v1/stats has the Docker sandbox's memory and
// processes from the engine.
func checkStats(t *testing.T, base, token, id string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/stats", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Stats []struct {
			Sandbox     string `json:"sandbox"`
			MemoryBytes uint64 `json:"memory_bytes"`
			MemoryLimit uint64 `json:"memory_limit_bytes"`
			Pids        uint64 `json:"pids"`
		} `json:"stats"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatalf("GET /v1/stats: %s: %v", resp.Status, err)
	}
	for _, s := range list.Stats {
		if s.Sandbox == id {
			if s.MemoryBytes == 0 || s.Pids == 0 || s.MemoryLimit == 0 {
				t.Errorf("stats of the Docker sandbox: %+v", s)
			}
			return
		}
	}
	t.Errorf("GET /v1/stats lacks sandbox %s: %+v", id, list.Stats)
}

func statusOf(resp *http.Response) string {
	if resp == nil {
		return "no answer"
	}
	return resp.Status
}
