package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// RequireBrowserEnv, set to 1, turns "no chromium" skips into failures
// (CI sets it, as it sets LIMBS_REQUIRE_DOCKER).
const RequireBrowserEnv = "LIMBS_REQUIRE_BROWSER"

// chromiumPath finds Debian's chromium (scripts/ci-setup.sh installs it).
func chromiumPath(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(RequireBrowserEnv) == "1" {
		t.Fatalf("no chromium on PATH, and %s=1 requires the browser tests: install it with `apt-get install -y chromium` (scripts/ci-setup.sh does)", RequireBrowserEnv)
	}
	t.Skip("browser tests skipped: no chromium on PATH (apt-get install -y chromium)")
	return ""
}

// browser is one headless Chromium for a test, recording every request
// its pages make.
type browser struct {
	t    testing.TB
	ctx  context.Context
	dir  string // screenshots
	step int

	mu   sync.Mutex
	urls []string
}

// newBrowser starts chromium headless on loopback only: it resolves no
// host name but 127.0.0.1 (host-resolver-rules), so that a request to
// another origin could not leave the machine even if one were made.
func newBrowser(t testing.TB, parent context.Context) *browser {
	t.Helper()
	path := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox, // root in CI; the page is our own
		chromedp.DisableGPU,
		chromedp.WindowSize(1440, 900),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider"),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelA := chromedp.NewExecAllocator(parent, opts...)
	b := &browser{t: t, dir: screenshotDir(t)}
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithListener(func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			b.urls = append(b.urls, e.Request.URL)
		case *network.EventWebSocketCreated:
			b.urls = append(b.urls, e.URL)
		}
	}))
	t.Cleanup(func() { cancel(); cancelA() })
	b.ctx = ctx
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("starting chromium (%s): %v", path, err)
	}
	return b
}

// screenshotDir is $LIMBS_SCREENSHOTS (created), else a temporary one.
func screenshotDir(t testing.TB) string {
	if d := os.Getenv("LIMBS_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// run runs actions within d.
func (b *browser) run(what string, d time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.shot("failed-" + safeFile(what))
		b.t.Fatalf("%s: %v", what, err)
	}
}

// shot writes a screenshot of the viewport, numbered in order.
func (b *browser) shot(name string) string {
	b.step++
	ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return ""
	}
	p := filepath.Join(b.dir, fmt.Sprintf("%02d-%s.png", b.step, name))
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s", p)
	return p
}

func safeFile(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, strings.ToLower(s))
}

// waitJS evaluates expr every 100 ms until it is true, for at most d.
func (b *browser) waitJS(what, expr string, d time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(d)
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) || i > 10000 {
			b.shot("failed-" + safeFile(what))
			b.t.Fatalf("waiting %s for %s (%s): last error %v", d, what, expr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	return evalIn[string](b, "reading "+sel, `(document.querySelector(`+jsString(sel)+`)||{}).textContent||""`)
}

// evalIn evaluates expr in the page and returns its value.
func evalIn[T any](b *browser, what, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.shot("failed-" + safeFile(what))
		b.t.Fatalf("%s: %v", what, err)
	}
	return v
}

func jsString(s string) string { return fmt.Sprintf("%q", s) }

// login logs in at base with token through the login page's form.
func (b *browser) login(base, token string) {
	b.t.Helper()
	b.run("the login page", 30*time.Second,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("login")),
	)
}

// requests returns every URL the browser asked for.
func (b *browser) requests() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.urls...)
}

// checkSameOrigin fails for any request to another origin than base's
// (its WebSockets included).
func (b *browser) checkSameOrigin(base string) {
	b.t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		b.t.Fatal(err)
	}
	n := 0
	for _, r := range b.requests() {
		ru, err := url.Parse(r)
		if err != nil {
			b.t.Errorf("request to an unparsable URL %q", r)
			continue
		}
		switch {
		case ru.Scheme == "data" || ru.Scheme == "blob":
		case (ru.Scheme == "http" || ru.Scheme == "ws") && ru.Host == u.Host:
		default:
			b.t.Errorf("the dashboard made a request to another origin: %s", r)
		}
		n++
	}
	if n == 0 {
		b.t.Errorf("no request recorded: the recorder does not work")
	}
	b.t.Logf("%d requests, all to %s", n, u.Host)
}

// cookieClient returns an HTTP client holding the browser's cookies for
// base (the HttpOnly session cookie included, read through the
// DevTools protocol).
func (b *browser) cookieClient(base string) (*http.Client, []*http.Cookie) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{base}})
	if err != nil {
		b.t.Fatalf("reading cookies: %v", err)
	}
	cs := res.Cookies
	var hc []*http.Cookie
	for _, c := range cs {
		if !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict {
			b.t.Errorf("cookie %s: HttpOnly %v, SameSite %v; want HttpOnly and Strict", c.Name, c.HTTPOnly, c.SameSite)
		}
		hc = append(hc, &http.Cookie{Name: c.Name, Value: c.Value})
	}
	if len(hc) == 0 {
		b.t.Fatal("the browser holds no session cookie after logging in")
	}
	jar, _ := cookiejar.New(nil)
	u, _ := url.Parse(base)
	jar.SetCookies(u, hc)
	return &http.Client{Jar: jar, Timeout: 30 * time.Second}, hc
}
