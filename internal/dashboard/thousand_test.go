package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/performance"
	"github.com/chromedp/chromedp"

	"github.com/limbs-dev/limbs/internal/control"
	"github.com/limbs-dev/limbs/internal/dashboard"
	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/wire"
)

// fakeProvider's sandboxes are one in-process HTTP server answering
// limbsd's health, reached over a fresh in-memory pipe per Dial: enough
// for the control plane to create, list and describe a thousand of them.
type fakeProvider struct {
	mu      sync.Mutex
	running map[string]bool
	conns   chan net.Conn
	done    chan struct{}
	once    sync.Once
	srv     *http.Server
	events  chan sandbox.Event
}

func newFakeProvider(t testing.TB) *fakeProvider {
	f := &fakeProvider{running: map[string]bool{}, conns: make(chan net.Conn), done: make(chan struct{}), events: make(chan sandbox.Event)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		wire.WriteJSON(w, http.StatusOK, wire.Health{Status: "ok", Version: "fake"})
	})
	f.srv = &http.Server{Handler: mux}
	go f.srv.Serve(f)
	t.Cleanup(func() { f.srv.Close() })
	return f
}

// The provider is its server's listener too.
func (f *fakeProvider) Accept() (net.Conn, error) {
	select {
	case c := <-f.conns:
		return c, nil
	case <-f.done:
		return nil, net.ErrClosed
	}
}
func (f *fakeProvider) Close() error   { f.once.Do(func() { close(f.done) }); return nil }
func (f *fakeProvider) Addr() net.Addr { return &net.UnixAddr{Name: "fake", Net: "unix"} }

func (f *fakeProvider) Name() string { return "fake" }
func (f *fakeProvider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running[spec.ID] = true
	return f.inst(spec.ID), nil
}
func (f *fakeProvider) inst(id string) sandbox.Instance {
	return sandbox.Instance{ID: id, ProviderID: "fake-" + id, State: sandbox.State{Running: f.running[id]}}
}
func (f *fakeProvider) Start(ctx context.Context, id string) error { return f.set(id, true) }
func (f *fakeProvider) Stop(ctx context.Context, id string) error  { return f.set(id, false) }
func (f *fakeProvider) set(id string, run bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.running[id]; !ok {
		return fmt.Errorf("fake %s: %w", id, wire.ErrNotFound)
	}
	f.running[id] = run
	return nil
}
func (f *fakeProvider) Remove(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.running, id)
	return nil
}
func (f *fakeProvider) Dial(ctx context.Context, id string) (net.Conn, error) {
	a, b := net.Pipe()
	select {
	case f.conns <- b:
		return a, nil
	case <-f.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
func (f *fakeProvider) Inspect(ctx context.Context, id string) (sandbox.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.running[id]; !ok {
		return sandbox.Instance{}, fmt.Errorf("fake %s: %w", id, wire.ErrNotFound)
	}
	return f.inst(id), nil
}
func (f *fakeProvider) List(ctx context.Context, instance string) ([]sandbox.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []sandbox.Instance
	for id := range f.running {
		out = append(out, f.inst(id))
	}
	return out, nil
}
func (f *fakeProvider) Events(ctx context.Context) (<-chan sandbox.Event, error) {
	return f.events, nil
}

// Stats reports made-up resource use, growing with time, so that the
// overview's columns fill.
func (f *fakeProvider) Stats(ctx context.Context, id string) (sandbox.Stats, error) {
	n := uint64(len(id)) + uint64(id[len(id)-1])
	return sandbox.Stats{CPUNanos: uint64(time.Now().UnixNano()/100) % 1e12, MemoryBytes: n << 20, MemoryLimitBytes: 2 << 30, Pids: n % 17, Time: time.Now()}, nil
}

// manySandboxes runs a control plane with n fake sandboxes (some with
// failed commands, some whose agent hit a limit) behind the dashboard on
// 127.0.0.1, and returns its URL and token.
func manySandboxes(t testing.TB, n int) (base, token string) {
	t.Helper()
	token = "thousand-token-0123456789"
	dir := t.TempDir()
	fp := newFakeProvider(t)
	plane, err := control.NewPlane(context.Background(), control.Options{
		StateDir: dir, Token: token, Providers: map[string]control.Provider{"fake": fp},
		DefaultImage: "fake/image:1", NoEventFollow: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := control.NewServer(plane)
	dash, err := dashboard.New(dashboard.Options{Plane: plane, Token: token, API: srv})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(dash) // 127.0.0.1
	t.Cleanup(func() { ts.Close(); dash.Close(); plane.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				sb, err := plane.Create(ctx, wire.CreateSandbox{Name: fmt.Sprintf("load-%04d", i), Cpus: 1, MemoryMB: 512, Pids: 128})
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					continue
				}
				ids[i] = sb.ID
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("creating %d sandboxes: %v", n, err)
	default:
	}
	// Every 50th has a command that failed, every 100th an agent that hit
	// its step limit (events as limbsd's journal and limbs agent write them).
	log := plane.EventLog()
	for i, id := range ids {
		if i%50 == 7 {
			code := 2
			start, _ := json.Marshal(wire.CommandStartedData{Text: "make test", Cwd: "/workspace", Via: "exec"})
			end, _ := json.Marshal(wire.CommandFinishedData{Status: "exited", ExitCode: &code, Cwd: "/workspace", DurationMs: 1234})
			if _, err := log.Append(id,
				wire.Event{Type: wire.EventCommandStarted, Session: "s_1", Command: "c_1", Source: wire.SourceAPI, Data: start},
				wire.Event{Type: wire.EventCommandFinished, Session: "s_1", Command: "c_1", Source: wire.SourceAPI, Data: end}); err != nil {
				t.Fatal(err)
			}
		}
		if i%100 == 3 {
			fin, _ := json.Marshal(wire.AgentFinishedData{Run: "r1", Reason: "max_steps", Steps: 50})
			if _, err := log.Append(id, wire.Event{Type: wire.EventAgentFinished, Source: wire.SourceAgent, Data: fin}); err != nil {
				t.Fatal(err)
			}
		}
		if i%10 == 5 {
			start, _ := json.Marshal(wire.CommandStartedData{Text: fmt.Sprintf("pytest -x tests/test_%d.py", i), Cwd: "/workspace", Via: "exec"})
			if _, err := log.Append(id, wire.Event{Type: wire.EventCommandStarted, Session: "s_1", Command: "c_2", Source: wire.SourceAPI, Data: start}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The dashboard's tracker reads them from the global stream.
	time.Sleep(500 * time.Millisecond)
	return ts.URL, token
}

// TestDashboardThousand: the overview of 1,000 sandboxes loads in a real
// headless Chromium, shows the counts and the failures by kind, renders
// only the rows in view (a virtualised list), and filters by search and by
// failure kind; no request goes to another origin.
func TestDashboardThousand(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the browser test takes a while")
	}
	chromiumPath(t)
	base, token := manySandboxes(t, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := newBrowser(t, ctx)
	b.login(base, token)
	b.waitJS("the overview", `document.body.dataset.ready === "overview"`, 60*time.Second)
	b.waitJS("resource use", `[...document.querySelectorAll(".trow .num")].some(c => c.textContent.includes("MiB"))`, 20*time.Second)
	b.shot("overview-1000")
	t.Logf("time to first render: %.0f ms", evalIn[float64](b, "first render", `window.limbsFirstRender`))

	if got := b.text(`.count[data-status=""] b`); got != "1000" {
		t.Errorf("sandboxes count %q, want 1000", got)
	}
	rows := evalIn[int](b, "rows", `document.querySelectorAll(".trow").length`)
	if rows == 0 || rows > 100 {
		t.Errorf("%d rows in the DOM for 1,000 sandboxes: want only those in view (a virtualised list)", rows)
	}
	if got := b.text(`.chip[data-kind="command"]`); !strings.Contains(got, "20") {
		t.Errorf("command exit failures %q, want 20", got)
	}
	if got := b.text(`.chip[data-kind="agent"]`); !strings.Contains(got, "10") {
		t.Errorf("agent limit failures %q, want 10", got)
	}

	// Search.
	b.run("searching", 20*time.Second,
		chromedp.Focus(chromedp.ID("search")),
		typeText("load-0420"),
	)
	b.waitJS("one match", `document.querySelector("#shown").textContent === "1 shown"`, 10*time.Second)
	// The count is set before the list draws its rows again: wait for the
	// row, then read it.
	b.waitJS("the match's row", `(() => { const r = document.querySelector(".trow"); return !!r && r.textContent.includes("load-0420") })()`, 10*time.Second)
	if got := b.text(".trow"); !strings.Contains(got, "load-0420") {
		t.Errorf("the search's row %q", got)
	}
	b.shot("overview-search")

	// Failures of a kind.
	evalIn[bool](b, "clearing the search", `(() => { const s = document.querySelector("#search"); s.value = ""; s.dispatchEvent(new Event("input")); return true })()`)
	b.run("the command failures", 10*time.Second, chromedp.Click(chromedp.CSS(`.chip[data-kind="command"]`)))
	b.waitJS("the command failures", `document.querySelector("#shown").textContent === "20 shown"`, 10*time.Second)
	b.waitJS("a failed row", `(() => { const r = document.querySelector(".trow"); return !!r && r.textContent.includes("exit 2") })()`, 10*time.Second)
	if got := b.text(".trow"); !strings.Contains(got, "exit 2") {
		t.Errorf("a failed row %q lacks its failure", got)
	}
	b.shot("overview-failures")
	b.checkSameOrigin(base)
}

// BenchmarkDashboardOverview reports the time from the overview's first
// request to its first render with 1,000 sandboxes, and the page's JS
// heap after it (Performance.getMetrics). It asserts no duration.
func BenchmarkDashboardOverview(b *testing.B) {
	chromiumPath(b)
	base, token := manySandboxes(b, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	br := newBrowser(b, ctx)
	br.login(base, token)
	br.waitJS("the overview", `document.body.dataset.ready === "overview"`, 60*time.Second)
	if _, err := chromedp.Call(br.ctx, performance.Enable, performance.EnableParams{}); err != nil {
		b.Fatal(err)
	}
	var render, heap float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		br.run("reloading", time.Minute, chromedp.Reload())
		br.waitJS("the overview", `document.body.dataset.ready === "overview" && window.limbsFirstRender > 0`, 60*time.Second)
		render += evalIn[float64](br, "first render", `window.limbsFirstRender`)
		m, err := chromedp.Call(br.ctx, performance.GetMetrics, cdp.Empty{})
		if err != nil {
			b.Fatal(err)
		}
		for _, x := range m.Metrics {
			if x.Name == "JSHeapUsedSize" {
				heap += x.Value
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(render/float64(b.N), "ms/first-render")
	b.ReportMetric(heap/float64(b.N)/(1<<20), "MiB-js-heap")
}
