package control

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/wire"
)

// fakeProvider is a hand-written provider whose "sandboxes" are HTTP
// servers answering health and echoing every other request (path, query,
// Authorization), so that the control plane's forwarding, registry,
// recovery and pool logic run against real sockets and real HTTP. They
// have no address nor directory: each Dial is a fresh socketpair whose
// other end the sandbox's server accepts.
type fakeProvider struct {
	mu        sync.Mutex
	sandboxes map[string]*fakeSandbox
	events    chan sandbox.Event
	// startErr, when set, makes Start fail (a sandbox that cannot come back).
	startErr error
	creates  int
	// beforeRemove, when set, runs at the start of Remove (as a container
	// being removed dies first, and Docker reports its death).
	beforeRemove func(id string)
	// defaults, when set, are the limits the provider applies where a
	// spec leaves them zero (as Docker's 2 CPUs, 2 GiB).
	defaults *sandbox.Spec
}

func (f *fakeProvider) WithDefaults(spec sandbox.Spec) sandbox.Spec {
	if d := f.defaults; d != nil {
		spec.Cpus = cmp.Or(spec.Cpus, d.Cpus)
		spec.MemoryMB = cmp.Or(spec.MemoryMB, d.MemoryMB)
		spec.Pids = cmp.Or(spec.Pids, d.Pids)
		spec.TmpMB = cmp.Or(spec.TmpMB, d.TmpMB)
	}
	return spec
}

type fakeSandbox struct {
	spec    sandbox.Spec
	running bool
	reason  string
	srv     *http.Server
	ln      *pairListener
}

func newFakeProvider() *fakeProvider {
	return &fakeProvider{sandboxes: map[string]*fakeSandbox{}, events: make(chan sandbox.Event, 64)}
}

func (f *fakeProvider) Name() string { return "fake" }

func (f *fakeProvider) Note(spec sandbox.Spec) string {
	if spec.Env["NOTE"] != "" {
		return "fake sandbox " + spec.ID + " note: " + spec.Env["NOTE"]
	}
	return ""
}

func (f *fakeProvider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates++
	if spec.Image == "broken" {
		return sandbox.Instance{}, errors.New("image broken does not start")
	}
	sb := &fakeSandbox{spec: spec}
	f.sandboxes[spec.ID] = sb
	if err := sb.serve(); err != nil {
		return sandbox.Instance{}, err
	}
	return f.instance(sb), nil
}

func (sb *fakeSandbox) serve() error {
	ln := newPairListener()
	token := sb.spec.Token
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		wire.WriteJSON(w, http.StatusOK, wire.Health{Status: "ok", Version: "fake"})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			wire.WriteError(w, fmt.Errorf("fake limbsd: wrong token: %w", wire.ErrUnauthorized))
			return
		}
		n, _ := io.Copy(io.Discard, r.Body)
		if d, err := time.ParseDuration(r.URL.Query().Get("delay")); err == nil {
			select { // a long answer (exec with yield_after)
			case <-time.After(d):
			case <-r.Context().Done():
			}
		}
		wire.WriteJSON(w, http.StatusOK, echo{Path: r.URL.Path, Query: r.URL.RawQuery, Method: r.Method, Sandbox: sb.spec.ID, Body: n})
	})
	sb.srv = &http.Server{Handler: mux}
	sb.ln = ln
	sb.running = true
	sb.reason = ""
	go sb.srv.Serve(ln)
	return nil
}

// echo is what the fake limbsd answers to every forwarded request.
type echo struct {
	Path    string `json:"path"`
	Query   string `json:"query"`
	Method  string `json:"method"`
	Sandbox string `json:"sandbox"`
	Body    int64  `json:"body"` // bytes of request body received
}

func (f *fakeProvider) instance(sb *fakeSandbox) sandbox.Instance {
	return sandbox.Instance{
		ID:         sb.spec.ID,
		ProviderID: "fake-" + sb.spec.ID,
		Labels: map[string]string{
			sandbox.LabelManaged:  "true",
			sandbox.LabelInstance: sb.spec.Instance,
			sandbox.LabelSandbox:  sb.spec.ID,
		},
		State: sandbox.State{Running: sb.running, Reason: sb.reason},
	}
}

func (f *fakeProvider) get(id string) (*fakeSandbox, error) {
	sb, ok := f.sandboxes[id]
	if !ok {
		return nil, fmt.Errorf("fake sandbox %s: %w", id, wire.ErrNotFound)
	}
	return sb, nil
}

// Dial connects to the sandbox's server over a new socketpair.
func (f *fakeProvider) Dial(ctx context.Context, id string) (net.Conn, error) {
	f.mu.Lock()
	sb, err := f.get(id)
	var ln *pairListener
	if err == nil {
		if !sb.running {
			err = fmt.Errorf("fake sandbox %s is stopped (%s): %w", id, sb.reason, sandbox.ErrNotRunning)
		}
		ln = sb.ln
	}
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return ln.dial(ctx)
}

func (f *fakeProvider) Start(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.get(id)
	if err != nil {
		return err
	}
	if f.startErr != nil {
		return f.startErr
	}
	if sb.running {
		return nil
	}
	return sb.serve()
}

func (sb *fakeSandbox) halt(reason string) {
	if sb.srv != nil {
		sb.srv.Close()
		sb.ln.Close()
		sb.srv, sb.ln = nil, nil
	}
	sb.running = false
	sb.reason = reason
}

func (f *fakeProvider) Stop(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.get(id)
	if err != nil {
		return err
	}
	sb.halt("")
	return nil
}

func (f *fakeProvider) Remove(ctx context.Context, id string) error {
	if f.beforeRemove != nil {
		f.beforeRemove(id)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.get(id)
	if err != nil {
		return err
	}
	sb.halt("")
	delete(f.sandboxes, id)
	return nil
}

func (f *fakeProvider) Inspect(ctx context.Context, id string) (sandbox.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.get(id)
	if err != nil {
		return sandbox.Instance{}, err
	}
	return f.instance(sb), nil
}

func (f *fakeProvider) List(ctx context.Context, instance string) ([]sandbox.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []sandbox.Instance
	for _, sb := range f.sandboxes {
		if sb.spec.Instance == instance {
			out = append(out, f.instance(sb))
		}
	}
	return out, nil
}

func (f *fakeProvider) Events(ctx context.Context) (<-chan sandbox.Event, error) {
	return f.events, nil
}

// kill makes a sandbox die on its own; with report, the provider tells the
// control plane (as Docker events would).
func (f *fakeProvider) kill(id, reason string, report bool) {
	f.mu.Lock()
	sb := f.sandboxes[id]
	sb.halt(reason)
	f.mu.Unlock()
	if report {
		f.events <- sandbox.Event{ID: id, Kind: "died", Reason: reason, Time: time.Now()}
	}
}

func (f *fakeProvider) ids() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for id := range f.sandboxes {
		out = append(out, id)
	}
	return out
}

func (f *fakeProvider) setStartErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.startErr = err
}

// closeAll stops every fake server (test cleanup).
func (f *fakeProvider) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, sb := range f.sandboxes {
		sb.halt("")
	}
}

// pairListener is a listener without an address: dial makes a socketpair
// and hands one end to Accept.
type pairListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPairListener() *pairListener {
	return &pairListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pairListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pairListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pairListener) Addr() net.Addr { return pairAddr{} }

type pairAddr struct{}

func (pairAddr) Network() string { return "socketpair" }
func (pairAddr) String() string  { return "socketpair" }

func (l *pairListener) dial(ctx context.Context) (net.Conn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		conns[i], err = net.FileConn(f)
		f.Close()
		if err != nil {
			if i == 1 {
				conns[0].Close()
			}
			return nil, err
		}
	}
	select {
	case l.conns <- conns[1]:
		return conns[0], nil
	case <-l.done:
		err = errors.New("fake sandbox: its server is closed")
	case <-ctx.Done():
		err = ctx.Err()
	}
	conns[0].Close()
	conns[1].Close()
	return nil, err
}
