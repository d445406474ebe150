package load

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Options configure a run: the load test, and the fault run and the soak,
// which are the load with faults or samples added.
type Options struct {
	// Limbs is the limbs binary that runs `limbs serve`; serve finds its
	// limbsd next to it.
	Limbs string
	// Provider is docker (the default) or local.
	Provider string
	// Clients run concurrently, each in a session of its own, over
	// Sandboxes sandboxes (client i in sandbox i mod Sandboxes).
	Clients, Sandboxes int
	// Duration is how long clients start new commands.
	Duration time.Duration
	// Timeout bounds each command, client side: one that has not ended
	// by then is counted as hung (default 60 s).
	Timeout time.Duration
	// Seed makes the choices of kinds and of faults repeatable.
	Seed int64
	// Faults injects faults while the load runs (the fault run).
	Faults bool
	// FaultKinds limits the faults to these (default: every kind the
	// provider has).
	FaultKinds []string
	// FaultGap is the mean time between the end of one fault's recovery
	// and the next fault (default Duration/12, at least 1 s).
	FaultGap time.Duration
	// Overlap injects each fault without waiting for the recovery of
	// the one before (a serve killed while it recovers a sandbox).
	Overlap bool
	// Sample, when set, samples RSS and open files of serve and of each
	// limbsd this often (the soak).
	Sample time.Duration
	// MemoryMB is each sandbox's memory limit (default: the provider's;
	// 256 with faults, so that a memory hog meets it soon).
	MemoryMB int64
	// Log gets progress lines (nil: none).
	Log io.Writer
}

// Kinds of commands.
const (
	KindShort      = "short"      // echo TOKEN
	KindChatty     = "chatty"     // 200 lines, each with the token
	KindInput      = "input"      // read x, answered with the token
	KindFile       = "file"       // file API: write, str_replace, read back
	KindDisconnect = "disconnect" // the client hangs up mid-command, then follows it again
)

// Outcomes of a command.
const (
	OutcomeOK      = "ok"      // ended with exactly its own output
	OutcomeFailed  = "failed"  // the client received a typed reason
	OutcomeWrong   = "wrong"   // ended with an output that is not its own
	OutcomeHung    = "hung"    // not ended within its timeout
	OutcomeUntyped = "untyped" // failed with an error carrying no API code
)

const chattyLines = 200

// tokenRE finds tokens in outputs: a command's token must come back in
// its own output and in no other.
var tokenRE = regexp.MustCompile(`tk[0-9a-f]{16}`)

// record is one command and what became of it.
type record struct {
	client  int
	sandbox string // id
	session string
	kind    string
	token   string
	start   time.Time
	dur     time.Duration
	outcome string
	reason  string // the typed reason of a failure, what was wrong
	resumed string // how it was followed to its end after a fault
	output  string // kept (first 2 KiB) when not ok; the error of a failure
	note    string // what the event log says of one not ok

	// lookup: its result was lost with a connection: the event log
	// says what became of it.
	lookup bool
	res    *wire.Result
}

type run struct {
	opts    Options
	sv      *serve
	ctl     *client.Sandboxes
	ids     []string // sandbox ids
	logf    func(format string, args ...any)
	started time.Time

	cut     []atomic.Bool // a disconnect fault asks client i to hang up
	done    atomic.Int64  // commands ended
	clients []*client.Client

	mu      sync.Mutex // guards the fields below
	records []*record
	tokens  map[string]int // token -> client, to name a foreign token
	faults  []Fault

	warnings map[string]int // serve's log, once it stopped
}

// Run runs the load (with faults, with samples) through a limbs serve of
// its own and returns the report. An error is a run that could not be set
// up; what went wrong under load is in the report (Pass false).
func Run(ctx context.Context, opts Options) (*Report, error) {
	if opts.Provider == "" {
		opts.Provider = "docker"
	}
	if opts.Clients <= 0 {
		opts.Clients = 64
	}
	if opts.Sandboxes <= 0 {
		opts.Sandboxes = 8
	}
	opts.Sandboxes = min(opts.Sandboxes, opts.Clients)
	if opts.Duration <= 0 {
		opts.Duration = time.Minute
	}
	if opts.Timeout <= 0 {
		opts.Timeout = time.Minute
	}
	if opts.FaultGap <= 0 {
		opts.FaultGap = max(time.Second, opts.Duration/12)
	}
	if opts.Faults && opts.MemoryMB == 0 {
		opts.MemoryMB = 256
	}
	r := &run{opts: opts, tokens: map[string]int{}, cut: make([]atomic.Bool, opts.Clients)}
	r.logf = func(format string, args ...any) {
		if opts.Log != nil {
			fmt.Fprintf(opts.Log, "%6.1fs  %s\n", time.Since(r.started).Seconds(), fmt.Sprintf(format, args...))
		}
	}
	r.started = time.Now()
	host := machine()
	sv, err := startServe(ctx, opts.Limbs, opts.Provider, "--max-sandboxes", strconv.Itoa(max(opts.Sandboxes, 1)))
	if sv != nil {
		r.sv = sv
	}
	if err != nil {
		if sv != nil {
			r.teardown(ctx)
		}
		return nil, err
	}
	rep := &Report{Provider: opts.Provider, Clients: opts.Clients, Sandboxes: opts.Sandboxes, Seed: opts.Seed, Mode: "load", Machine: host}
	switch {
	case opts.Faults:
		rep.Mode = "faults"
	case opts.Sample > 0:
		rep.Mode = "soak"
	}
	r.ctl = sv.client("").Sandboxes()
	baseline, gerr := sv.goroutines(ctx)
	err = r.setup(ctx)
	if err == nil {
		r.load(ctx, rep)
	}
	left, goroutines := r.teardown(ctx)
	if err != nil {
		return nil, err
	}
	rep.Leftovers = left
	if gerr == nil && goroutines >= 0 {
		rep.Goroutines = [2]int{baseline, goroutines}
	}
	r.finish(rep)
	return rep, nil
}

// setup creates the sandboxes and one session per client.
func (r *run) setup(ctx context.Context) error {
	r.ids = make([]string, r.opts.Sandboxes)
	errs := make(chan error, r.opts.Sandboxes)
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i := range r.opts.Sandboxes {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			sb, err := r.ctl.Create(ctx, wire.CreateSandbox{Name: fmt.Sprintf("load-%d", i), MemoryMB: r.opts.MemoryMB})
			if err != nil {
				errs <- fmt.Errorf("creating sandbox %d: %w", i, err)
				return
			}
			r.mu.Lock()
			r.ids[i] = sb.ID
			r.mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	r.logf("%d sandboxes created (%s provider)", len(r.ids), r.opts.Provider)
	r.clients = make([]*client.Client, r.opts.Clients)
	errs = make(chan error, r.opts.Clients+len(r.ids))
	for i := range r.opts.Clients {
		r.clients[i] = r.sv.client("/sandboxes/" + r.ids[i%len(r.ids)])
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := r.clients[i].CreateSession(ctx, wire.CreateSession{Name: sessionName(i)}); err != nil {
				errs <- fmt.Errorf("creating session %s: %w", sessionName(i), err)
			}
		})
	}
	if r.opts.Faults {
		for _, id := range r.ids {
			wg.Go(func() {
				if _, err := r.sv.client("/sandboxes/"+id).CreateSession(ctx, wire.CreateSession{Name: "hog"}); err != nil {
					errs <- fmt.Errorf("creating session hog: %w", err)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	r.logf("%d sessions created", r.opts.Clients)
	if r.opts.Sample > 0 {
		return r.fill(ctx)
	}
	return nil
}

// fillBytes is what each session of a soak prints before the load: more
// than the output a session keeps in memory (8 MiB, docs/api.md), and so
// more than limbsd's journal and serve's event log keep of output too.
const fillBytes = 9 << 20

// fill makes every session of a soak print fillBytes before the load, so
// that the stores bounded by size (each session's output ring, whose
// pages the kernel backs as output reaches them; the journal's and the
// event log's output in memory) are full before the first sample: a
// chatty command adds a few KiB, and at the soak's rate a session's ring
// would take longer than the soak to fill, which its slope would show as
// growth.
// What the slope then shows is what grows with time, not what fills.
func (r *run) fill(ctx context.Context) error {
	keep := 1 // bytes of the output in the result
	cmd := fmt.Sprintf("yes 'limbs soak: filling the output kept in memory' | head -c %d; echo filled", fillBytes)
	errs := make(chan error, len(r.clients))
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for i, c := range r.clients {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			res, err := c.Exec(ctx, sessionName(i), wire.Exec{Command: cmd, Timeout: 120, MaxOutput: &keep})
			switch {
			case err != nil:
				errs <- fmt.Errorf("filling session %s: %w", sessionName(i), err)
			case res.ExitCode == nil || *res.ExitCode != 0:
				errs <- fmt.Errorf("filling session %s: the command did not succeed: %+v", sessionName(i), res)
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	r.logf("%d sessions printed %d MiB each before the load", len(r.clients), fillBytes>>20)
	return nil
}

func sessionName(i int) string { return fmt.Sprintf("c%d", i) }

// load runs the clients (and the injector, and the sampler) and collects
// what they did.
func (r *run) load(ctx context.Context, rep *Report) {
	stop := make(chan struct{})
	loadStart := time.Now()
	var wg sync.WaitGroup
	for i := range r.opts.Clients {
		wg.Go(func() { r.client(ctx, i, stop) })
	}
	var samples []Sample
	sampled := make(chan struct{})
	if r.opts.Sample > 0 {
		go func() { defer close(sampled); samples = r.sample(ctx, stop) }()
	} else {
		close(sampled)
	}
	// The first round of faults (one of each kind) is always injected:
	// the run is longer than Duration when the faults take longer.
	firstRound := make(chan struct{})
	injected := make(chan struct{})
	if r.opts.Faults {
		go func() { defer close(injected); r.inject(ctx, stop, firstRound) }()
	} else {
		close(firstRound)
		close(injected)
	}
	t := time.NewTimer(r.opts.Duration)
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	cap := time.NewTimer(10 * time.Minute)
	select {
	case <-firstRound:
	case <-cap.C:
		r.logf("the first round of faults did not end within 10 minutes after the load's end")
	case <-ctx.Done():
	}
	t.Stop()
	cap.Stop()
	loadEnd := time.Now()
	rep.Seconds = loadEnd.Sub(loadStart).Seconds()
	rep.Load = loadAverage()
	close(stop)
	wg.Wait()
	<-injected
	<-sampled
	r.logf("load ended: %d commands", r.done.Load())
	if r.opts.Faults {
		if err := r.waitRunning(ctx, 5*time.Minute); err != nil {
			r.logf("after the load: %v", err)
		}
	}
	r.resolve(ctx)
	r.checkFaults(ctx)
	rep.Samples = samples
}

// client is one client's loop: a command at a time in its session until
// stop, each checked on its end.
func (r *run) client(ctx context.Context, i int, stop <-chan struct{}) {
	rng := mrand.New(mrand.NewPCG(uint64(r.opts.Seed), uint64(i)+1))
	c := r.clients[i]
	id := r.ids[i%len(r.ids)]
	for n := 0; n < 1_000_000; n++ {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		kind := KindShort
		switch p := rng.IntN(100); {
		case p < 40:
		case p < 60:
			kind = KindChatty
		case p < 80:
			kind = KindInput
		default:
			kind = KindFile
		}
		if r.cut[i].CompareAndSwap(true, false) {
			kind = KindDisconnect
		}
		rec := r.do(ctx, c, i, id, kind)
		r.mu.Lock()
		r.records = append(r.records, rec)
		r.mu.Unlock()
		r.done.Add(1)
		if rec.outcome != OutcomeOK && ctx.Err() == nil {
			r.settle(ctx, c, sessionName(i))
		}
	}
}

func newCommandToken() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "tk" + hex.EncodeToString(b)
}

// commandText is what a kind runs, and expected what its output must be.
func commandText(kind, tok string) string {
	switch kind {
	case KindShort:
		return "echo " + tok
	case KindChatty:
		return fmt.Sprintf("seq -f '%s %%g' 1 %d", tok, chattyLines)
	case KindInput:
		// The no-op ":" puts the token in the command's text, where the
		// event log finds it.
		return ": " + tok + `; read -r -p 'ask> ' x; echo "got $x"`
	case KindDisconnect:
		return fmt.Sprintf("for i in $(seq 1 10); do echo %s $i; sleep 0.1; done", tok)
	}
	return ""
}

func expected(kind, tok string) string {
	var b strings.Builder
	switch kind {
	case KindShort:
		return tok + "\n"
	case KindChatty:
		for i := 1; i <= chattyLines; i++ {
			fmt.Fprintf(&b, "%s %d\n", tok, i)
		}
	case KindInput:
		return "ask> " + tok + "\ngot " + tok + "\n"
	case KindDisconnect:
		for i := 1; i <= 10; i++ {
			fmt.Fprintf(&b, "%s %d\n", tok, i)
		}
	case KindFile:
		return "a " + tok + "-edited b\n"
	}
	return b.String()
}

// do runs one command and judges it.
func (r *run) do(ctx context.Context, c *client.Client, i int, id, kind string) *record {
	rec := &record{client: i, sandbox: id, session: sessionName(i), kind: kind, token: newCommandToken(), start: time.Now()}
	r.mu.Lock()
	r.tokens[rec.token] = i
	r.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	var out string
	var err error
	if kind == KindFile {
		out, err = r.fileEdit(cctx, c, rec)
	} else {
		out, err = r.command(cctx, c, rec)
	}
	rec.dur = time.Since(rec.start)
	r.judge(ctx, cctx, c, rec, out, err)
	return rec
}

// transportErr is an error of the connection to serve (serve killed, its
// socket gone), not an answer of serve.
func transportErr(err error) bool {
	var re *wire.RemoteError
	if errors.As(err, &re) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &ne) || errors.As(err, &oe) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EPIPE)
}

// command runs a shell command and follows it to its end: through input
// it waits for, a hang-up of its own client, and a restart of serve.
func (r *run) command(ctx context.Context, c *client.Client, rec *record) (string, error) {
	yield := 10.0
	wait := wire.Wait{YieldAfter: &yield}
	callCtx, cancelCall := ctx, context.CancelFunc(func() {})
	if rec.kind == KindDisconnect {
		callCtx, cancelCall = context.WithTimeout(ctx, 300*time.Millisecond)
	}
	ex := wire.Exec{Command: commandText(rec.kind, rec.token), Timeout: 30}
	if rec.kind == KindInput {
		// The prompt is the cue to answer (without it, a read is seen
		// waiting once it has been silent for a second).
		prompt := `^ask> $`
		ex.Until = &wire.Until{Output: &prompt}
	}
	res, err := c.Exec(callCtx, rec.session, ex)
	// Only the cut this client made itself is a hang-up to follow.
	hungUp := err != nil && callCtx.Err() != nil && ctx.Err() == nil && rec.kind == KindDisconnect
	cancelCall()
	var out strings.Builder
	answered := false
	for step := 0; step < 10_000; step++ {
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return out.String(), ctx.Err()
			case hungUp:
				// This client hung up: it follows its command again.
				hungUp = false
				rec.resumed = strings.TrimPrefix(rec.resumed+", after its client hung up", ", ")
				rec.lookup = true
				res, err = c.Wait(ctx, rec.session, wait)
				continue
			case transportErr(err):
				if herr := r.sv.waitHealthy(ctx, r.opts.Timeout); herr != nil {
					return out.String(), err
				}
				rec.resumed = strings.TrimPrefix(rec.resumed+", after limbs serve restarted", ", ")
				rec.lookup = true
				// An input cut off with serve may never have been typed:
				// a read still waiting gets it again, unless limbsd's
				// journal has it typed (typing it twice would put the
				// second one's echo in the output).
				if answered {
					answered = typed(ctx, c, rec.token)
				}
				res, err = c.Wait(ctx, rec.session, wait)
				continue
			case errors.Is(err, wire.ErrNoCommand) && rec.lookup:
				// Its end was answered on the connection that went:
				// the event log and the output stream have it.
				return out.String(), nil
			}
			return out.String(), err
		}
		out.WriteString(res.Output)
		if res.Status != wire.StatusRunning {
			rec.res = &res
			rec.lookup = false
			return out.String(), nil
		}
		if rec.kind == KindInput && !answered && (res.WaitingForInput || res.Matched != "") {
			answered = true
			res, err = c.Input(ctx, rec.session, wire.Input{Text: rec.token + "\n"})
			continue
		}
		res, err = c.Wait(ctx, rec.session, wait)
	}
	return out.String(), fmt.Errorf("command %s did not end in 10,000 results", rec.token)
}

// typed reports whether limbsd's journal records an input of token
// (false when it cannot tell).
func typed(ctx context.Context, c *client.Client, token string) bool {
	from := uint64(1)
	for range 64 {
		evs, err := c.Events(ctx, from, 2000, false)
		if err != nil || len(evs.Events) == 0 {
			return false
		}
		for _, ev := range evs.Events {
			if ev.Type == wire.EventInput && strings.Contains(string(ev.Data), token) {
				return true
			}
		}
		if evs.Next <= from {
			return false
		}
		from = evs.Next
	}
	return false
}

// fileEdit writes a file with the token, edits it with str_replace and
// reads it back.
func (r *run) fileEdit(ctx context.Context, c *client.Client, rec *record) (string, error) {
	fs := c.FileStore()
	path := "/workspace/" + rec.session + ".txt"
	if r.opts.Provider == "local" {
		path = "/tmp/" + rec.session + "-" + rec.sandbox + ".txt"
	}
	if _, err := fs.WriteFile(ctx, path, []byte("a "+rec.token+" b\n"), 0o644, ""); err != nil {
		return "", err
	}
	old, repl := rec.token, rec.token+"-edited"
	if _, err := c.Edit(ctx, wire.Edit{Command: "str_replace", Path: path, OldStr: &old, NewStr: &repl}); err != nil {
		return "", err
	}
	b, _, err := fs.ReadFile(ctx, path)
	return string(b), err
}

// judge sets a record's outcome.
func (r *run) judge(ctx, cctx context.Context, c *client.Client, rec *record, out string, err error) {
	keep := func(s string) {
		if len(s) > 2048 {
			s = s[:2048]
		}
		rec.output = s
	}
	want := expected(rec.kind, rec.token)
	switch {
	case err != nil && errors.Is(err, context.DeadlineExceeded) && cctx.Err() != nil && ctx.Err() == nil:
		rec.outcome, rec.reason = OutcomeHung, fmt.Sprintf("not ended within %s", r.opts.Timeout)
		keep(out)
		return
	case err != nil:
		var re *wire.RemoteError
		switch {
		case errors.As(err, &re):
			rec.outcome, rec.reason = OutcomeFailed, re.Code
		case ctx.Err() != nil:
			rec.outcome, rec.reason = OutcomeFailed, "interrupted"
		case transportErr(err):
			rec.outcome, rec.reason = OutcomeFailed, "serve_unreachable"
		default:
			rec.outcome, rec.reason = OutcomeUntyped, err.Error()
		}
		if rec.outcome != OutcomeUntyped {
			rec.output = err.Error()
		}
		return
	}
	if rec.lookup && rec.res == nil {
		// Resolved from the event log after the load (resolve).
		rec.outcome = OutcomeFailed
		rec.reason = "unresolved"
		return
	}
	if foreign := r.foreign(rec, out); foreign != "" {
		rec.outcome, rec.reason = OutcomeWrong, foreign
		keep(out)
		return
	}
	if out == want {
		rec.outcome = OutcomeOK
		return
	}
	// A result was lost with a hung-up or killed connection: the
	// command's output stream holds what it printed.
	if rec.resumed != "" && rec.res != nil {
		if raw, rerr := streamOutput(cctx, c, rec.session, rec.res.OffsetStart, rec.res.OffsetEnd); rerr == nil && raw == want {
			rec.outcome = OutcomeOK
			rec.resumed += "; output read back from the stream"
			return
		}
	}
	rec.outcome, rec.reason = OutcomeWrong, "output differs from the command's own"
	keep(out)
}

// foreign names a token in out that is not rec's.
func (r *run) foreign(rec *record, out string) string {
	for _, t := range tokenRE.FindAllString(out, -1) {
		if t != rec.token {
			r.mu.Lock()
			owner, ok := r.tokens[t]
			r.mu.Unlock()
			if ok {
				return fmt.Sprintf("holds token %s of client %d", t, owner)
			}
			return fmt.Sprintf("holds token %s of no command", t)
		}
	}
	return ""
}

// streamOutput is the raw output stream from..to, carriage returns and
// the escape sequences readline writes removed.
func streamOutput(ctx context.Context, c *client.Client, session string, from, to int64) (string, error) {
	rc, err := c.Output(ctx, session, from, to)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 8<<20))
	if err != nil {
		return "", err
	}
	s := strings.ReplaceAll(string(b), "\r", "")
	s = csiRE.ReplaceAllString(s, "")
	return s, nil
}

var csiRE = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)

// settle waits, after a command that did not end well, until the
// client's session is idle in a running sandbox again (recreating the
// session when it is gone), at most 2 minutes.
func (r *run) settle(ctx context.Context, c *client.Client, session string) {
	yield := 5.0
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		_, err := c.Wait(wctx, session, wire.Wait{YieldAfter: &yield})
		cancel()
		switch {
		case errors.Is(err, wire.ErrNoCommand):
			return
		case err == nil:
			continue
		case errors.Is(err, wire.ErrNotFound):
			_, _ = c.CreateSession(ctx, wire.CreateSession{Name: session})
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// waitRunning waits until every sandbox is running and serve answers.
func (r *run) waitRunning(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		list, err := r.ctl.List(ctx)
		if err == nil {
			n := 0
			for _, sb := range list {
				if sb.Status == wire.SandboxRunning {
					n++
				}
			}
			if n == len(r.ids) {
				return nil
			}
			err = fmt.Errorf("%d of %d sandboxes running", n, len(r.ids))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// teardown removes every sandbox through serve, stops it, and lists what
// is left over: containers and volumes of its instance, socket
// directories, processes. It returns serve's goroutines once the
// sandboxes were gone (-1 when unknown).
func (r *run) teardown(ctx context.Context) (left []string, goroutines int) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer cancel()
	goroutines = -1
	sv := r.sv
	if sv.pid() == 0 {
		if err := sv.start(ctx); err != nil {
			left = append(left, "limbs serve could not be started again to remove the sandboxes: "+err.Error())
		}
	}
	if sv.pid() != 0 {
		list, err := r.ctl.List(ctx)
		if err != nil {
			left = append(left, "listing the sandboxes: "+err.Error())
		}
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		var mu sync.Mutex
		for _, sb := range list {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				var err error
				for attempt := 0; attempt < 3; attempt++ {
					if err = r.ctl.Remove(ctx, sb.ID); err == nil || errors.Is(err, wire.ErrNotFound) {
						return
					}
					time.Sleep(time.Second)
				}
				mu.Lock()
				left = append(left, fmt.Sprintf("removing sandbox %s: %v", sb.ID, err))
				mu.Unlock()
			})
		}
		wg.Wait()
		for _, c := range r.clients {
			if c != nil {
				c.HTTPClient().CloseIdleConnections()
			}
		}
		r.ctl.Client().HTTPClient().CloseIdleConnections()
		// Goroutines of closed connections and removed sandboxes end
		// soon after: wait for the count to stop falling.
		prev := -1
		for i := 0; i < 40; i++ {
			n, err := sv.goroutines(ctx)
			if err != nil {
				break
			}
			goroutines = n
			if n == prev {
				break
			}
			prev = n
			time.Sleep(250 * time.Millisecond)
		}
		sv.stop()
	}
	sv.kill()
	if r.opts.Provider == "docker" || r.opts.Provider == "" {
		if inst, err := sv.instance(); err != nil {
			left = append(left, "reading the instance id: "+err.Error())
		} else {
			containers, volumes, err := instanceObjects(ctx, inst)
			if err != nil {
				left = append(left, err.Error())
			}
			for _, c := range containers {
				left = append(left, "container "+c)
			}
			for _, v := range volumes {
				left = append(left, "volume "+v)
			}
			sweep(ctx, inst)
		}
	}
	if es, err := os.ReadDir(sv.state + "/sandboxes"); err == nil {
		for _, e := range es {
			left = append(left, "sandbox directory "+sv.state+"/sandboxes/"+e.Name())
		}
	}
	for _, p := range processesMentioning(sv.dir) {
		left = append(left, "process "+p)
	}
	r.warnings = sv.warnings()
	if len(left) == 0 {
		_ = os.RemoveAll(sv.dir)
	} else {
		r.logf("left over (state dir %s kept):\n  %s", sv.dir, strings.Join(left, "\n  "))
	}
	return left, goroutines
}
