package main

// limbs agent --tasks: batch runs of many tasks, each in its own sandbox
// of limbs serve (docs/agent.md, "Batch runs").

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/limbs-dev/limbs/internal/agent"
	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/tool"
	"github.com/limbs-dev/limbs/internal/wire"
)

// batchFlags are the flags of a batch run (limbs agent --tasks).
type batchFlags struct {
	tasks    string
	parallel int
	out      string
	timeout  time.Duration
}

func addBatchFlags(fs *flag.FlagSet) *batchFlags {
	b := &batchFlags{}
	fs.StringVar(&b.tasks, "tasks", "", "run a batch: a JSON lines file of tasks {id, image, setup, instruction, test}, each in its own sandbox of limbs serve (instead of one TASK)")
	fs.IntVar(&b.parallel, "parallel", 4, "with --tasks: tasks run at the same time (1 to 256)")
	fs.StringVar(&b.out, "out", "", "with --tasks: the results directory (results.jsonl and a transcript per task); a restart skips the tasks it holds a result of")
	fs.DurationVar(&b.timeout, "task-timeout", 90*time.Minute, "with --tasks: wall time of one task, sandbox, setup, agent and test included")
	return b
}

// batchUsage checks the flags of a batch run; "" when they are fine.
func (b *batchFlags) usage(f *agentFlags) string {
	switch {
	case b.out == "":
		return "--tasks needs --out DIR, the directory the results go to"
	case b.parallel < 1 || b.parallel > 256:
		return fmt.Sprintf("--parallel %d: give 1 to 256", b.parallel)
	case b.timeout <= 0:
		return "--task-timeout must be positive"
	case f.cn.sandbox != "":
		return "--tasks makes a sandbox per task: drop --sandbox and LIMBS_SANDBOX (--image is the image of tasks that name none)"
	case f.approve != "auto":
		return "--tasks runs unattended: --approve ask is for one run"
	case f.keep:
		return "--tasks removes every task's sandbox: drop --keep"
	}
	return ""
}

// batchTask is one line of the tasks file.
type batchTask struct {
	ID          string `json:"id"`
	Image       string `json:"image,omitempty"`
	Setup       string `json:"setup,omitempty"`
	Instruction string `json:"instruction"`
	Test        string `json:"test"`
}

// Failure kinds of a batch result.
const (
	failTest  = "test_failed"    // the test ran and did not pass
	failLimit = "agent_limit"    // a limit (steps, tokens, cost, time) stopped the agent
	failAgent = "agent_stopped"  // the agent stopped on its own without finishing (stuck, no tool calls)
	failModel = "model_error"    // the model server refused or kept failing
	failInfra = "infrastructure" // the sandbox, setup or test could not be run
)

// batchResult is one line of results.jsonl.
type batchResult struct {
	ID      string `json:"id"`
	Passed  bool   `json:"passed"`
	Failure string `json:"failure,omitempty"`
	// Reason is how the agent's run ended (agent.StopReason); empty when
	// it did not run.
	Reason     agent.StopReason `json:"reason,omitempty"`
	Message    string           `json:"message,omitempty"`
	TestExit   *int             `json:"test_exit,omitempty"`
	Steps      int              `json:"steps"`
	Tokens     int64            `json:"tokens"`
	DurationMs int64            `json:"duration_ms"`
	// Sandbox is the id of the task's sandbox (removed at its end).
	Sandbox string `json:"sandbox,omitempty"`
}

// error: the result counts as an error (not the agent's failing).
func (r batchResult) error() bool { return r.Failure == failInfra || r.Failure == failModel }

var taskID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// maxTaskLine is the most bytes of one line of the tasks file.
const maxTaskLine = 16 << 20

// maxTestOutput is the most bytes of a setup's or a test's output kept
// (its tail), for the result's message.
const maxTestOutput = 64 << 10

// loadTasks reads and checks the tasks file; image is the default image.
func loadTasks(path, image string) ([]batchTask, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	var tasks []batchTask
	seen := map[string]bool{}
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 64<<10), maxTaskLine)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var t batchTask
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&t); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, n, err)
		}
		if t.Image == "" {
			t.Image = image
		}
		switch {
		case !taskID.MatchString(t.ID):
			return nil, fmt.Errorf("%s:%d: id %q: give letters, digits, '.', '_' or '-', at most 64", path, n, t.ID)
		case seen[t.ID]:
			return nil, fmt.Errorf("%s:%d: id %q is used twice: every task needs its own id", path, n, t.ID)
		case strings.TrimSpace(t.Instruction) == "":
			return nil, fmt.Errorf("%s:%d: task %s has no instruction", path, n, t.ID)
		case strings.TrimSpace(t.Test) == "":
			return nil, fmt.Errorf("%s:%d: task %s has no test (the command whose exit code grades it)", path, n, t.ID)
		case t.Image == "":
			return nil, fmt.Errorf("%s:%d: task %s has no image: give one in the task or --image", path, n, t.ID)
		}
		seen[t.ID] = true
		tasks = append(tasks, t)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s: a line is longer than %d bytes, the most a task may be; put big setup scripts in a file of the image, or fetch them in setup", path, maxTaskLine)
		}
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(tasks) == 0 {
		return nil, fmt.Errorf("%s holds no task", path)
	}
	return tasks, nil
}

// readResults reads the results of an earlier run of the batch. A last
// line without its newline (a write cut by a crash) is cut off the
// file, so that the next result starts a line of its own.
func readResults(path string) (map[string]batchResult, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]batchResult{}, nil
	}
	if err != nil {
		return nil, err
	}
	if i := bytes.LastIndexByte(b, '\n'); i < len(b)-1 {
		if err := os.Truncate(path, int64(i+1)); err != nil {
			return nil, fmt.Errorf("cutting the half-written last line off %s: %w", path, err)
		}
		b = b[:i+1]
	}
	done := map[string]batchResult{}
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		var r batchResult
		if len(line) == 0 || json.Unmarshal(line, &r) != nil || r.ID == "" {
			continue
		}
		done[r.ID] = r
	}
	return done, nil
}

// batchPrefix is the name prefix of the sandboxes of the batch whose
// results go to out: the same for every run of the same --out.
func batchPrefix(out string) string {
	abs, err := filepath.Abs(out)
	if err != nil {
		abs = out
	}
	h := sha256.Sum256([]byte(abs))
	return "batch-" + hex.EncodeToString(h[:6]) + "-"
}

// maxSandboxName is the longest sandbox name limbs serve takes
// (sandbox.NameRule).
const maxSandboxName = 63

// sandboxName is the name of task id's sandbox: the batch's prefix and
// the id, or, when that is longer than a name may be, the prefix, the
// id's start and a hash of the whole id (the same for every run of the
// batch, and one of its own for each id).
func (b *batch) sandboxName(id string) string {
	if n := b.prefix + id; len(n) <= maxSandboxName {
		return n
	}
	h := sha256.Sum256([]byte(id))
	tag := "-" + hex.EncodeToString(h[:4])
	return b.prefix + id[:maxSandboxName-len(b.prefix)-len(tag)] + tag
}

// batch is a running batch.
type batch struct {
	f      *agentFlags
	key    string
	system string
	log    *slog.Logger
	sbs    *client.Sandboxes
	prefix string

	mu       sync.Mutex // guards the fields below and the writes to results
	results  *os.File
	total    int
	done     int
	passed   int
	failed   int
	errs     int
	running  int
	writeErr error
}

func runBatch(ctx context.Context, f *agentFlags, key, system string, log *slog.Logger) int {
	bf := f.batch
	tasks, err := loadTasks(bf.tasks, f.image)
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs agent: --tasks: %v\n", err)
		return 2
	}
	if err := os.MkdirAll(bf.out, 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "limbs agent: --out: %v\n", err)
		return 1
	}
	path := filepath.Join(bf.out, "results.jsonl")
	prior, err := readResults(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs agent: %v\n", err)
		return 1
	}
	addr := f.cn.addr
	if addr == "" {
		addr = defaultControlAddr
	}
	sbs, err := (&controlConn{addr: addr, token: f.cn.token}).client()
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs agent: %s\n", safeErr(err))
		return 1
	}
	results, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs agent: %v\n", err)
		return 1
	}
	defer results.Close()
	b := &batch{f: f, key: key, system: system, log: log, sbs: sbs, prefix: batchPrefix(bf.out), results: results, total: len(tasks)}
	var todo []batchTask
	for _, t := range tasks {
		if r, ok := prior[t.ID]; ok {
			b.count(r)
			continue
		}
		todo = append(todo, t)
	}
	if err := b.sweep(ctx, tasks); err != nil {
		fmt.Fprintf(os.Stderr, "limbs agent: %s\n", safeErr(err))
		return 1
	}
	if len(prior) > 0 {
		fmt.Fprintf(os.Stderr, "limbs agent: %d of %d tasks have a result in %s already; running the other %d\n", b.done, b.total, path, len(todo))
	}

	var wg sync.WaitGroup
	sem := make(chan struct{}, bf.parallel)
	stopProgress := b.progress(ctx)
	for _, t := range todo {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break // Ctrl-C: start no more tasks
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			b.runTask(ctx, t)
		}()
	}
	wg.Wait()
	stopProgress()
	b.mu.Lock()
	defer b.mu.Unlock()
	fmt.Fprintf(os.Stderr, "== %d of %d tasks: %d passed, %d failed, %d errors (results in %s)\n",
		b.done, b.total, b.passed, b.failed, b.errs, path)
	switch {
	case b.writeErr != nil:
		fmt.Fprintf(os.Stderr, "limbs agent: writing %s: %v; run the same command again to redo the tasks without a result\n", path, b.writeErr)
		return 1
	case ctx.Err() != nil:
		fmt.Fprintf(os.Stderr, "limbs agent: interrupted: %d tasks have no result; run the same command again to run them\n", b.total-b.done)
		return exitInterrupted
	}
	return 0
}

// sweep removes the sandboxes an earlier run of this batch left (it was
// killed): those named with the batch's prefix and a task's id. No other
// sandbox is touched.
func (b *batch) sweep(ctx context.Context, tasks []batchTask) error {
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	l, err := b.sbs.List(lctx)
	if err != nil {
		return fmt.Errorf("listing the sandboxes of limbs serve: %w", err)
	}
	ours := map[string]bool{}
	for _, t := range tasks {
		ours[b.sandboxName(t.ID)] = true
	}
	for _, sb := range l {
		if ours[sb.Name] {
			fmt.Fprintf(os.Stderr, "limbs agent: removing sandbox %s (%s) left by an earlier run of this batch\n", safe(sb.Name), safe(sb.ID))
			b.remove(sb.ID)
		}
	}
	return nil
}

// remove removes sandbox id, bounded, whatever ctx the task had.
func (b *batch) remove(id string) {
	rctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := b.sbs.Remove(rctx, id); err != nil && !errors.Is(err, wire.ErrNotFound) {
		fmt.Fprintf(os.Stderr, "limbs agent: removing sandbox %s: %s; remove it with 'limbs sandbox rm %s' (a restart of the batch removes it too)\n", safe(id), safeErr(err), safe(id))
	}
}

// count adds r to the tally.
func (b *batch) count(r batchResult) {
	b.done++
	switch {
	case r.Passed:
		b.passed++
	case r.error():
		b.errs++
	default:
		b.failed++
	}
}

// progress prints the progress line on stderr every few seconds and
// at each result, until the returned func is called.
func (b *batch) progress(ctx context.Context) func() {
	stop := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				b.mu.Lock()
				b.printProgress()
				b.mu.Unlock()
			}
		}
	}()
	return func() { close(stop); <-ended }
}

// printProgress writes the progress line; b.mu is held.
func (b *batch) printProgress() {
	fmt.Fprintf(os.Stderr, "[%d/%d] %d passed, %d failed, %d error, %d running\n", b.done, b.total, b.passed, b.failed, b.errs, b.running)
}

// record appends r to results.jsonl in one write, synced: a kill leaves
// either the whole line or none (readResults cuts a half line a crash of
// the machine may leave).
func (b *batch) record(r batchResult) {
	line, _ := json.Marshal(r)
	line = append(line, '\n')
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := b.results.Write(line); err != nil {
		b.writeErr = err
		return
	}
	if err := b.results.Sync(); err != nil {
		b.writeErr = err
		return
	}
	b.count(r)
	b.printProgress()
}

// runTask runs t in a sandbox of its own and records its result, unless
// the batch was interrupted (ctx), in which case it records nothing.
func (b *batch) runTask(ctx context.Context, t batchTask) {
	b.mu.Lock()
	b.running++
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.running--
		b.mu.Unlock()
	}()
	start := time.Now()
	tctx, cancel := context.WithTimeout(ctx, b.f.batch.timeout)
	defer cancel()
	r := b.task(tctx, t)
	if ctx.Err() != nil {
		return // interrupted: no result, the task runs again next time
	}
	if tctx.Err() != nil && !r.Passed && r.Failure != failLimit {
		r.Failure = failLimit
		r.Message = fmt.Sprintf("the task reached its wall time of %s (--task-timeout): %s", b.f.batch.timeout, r.Message)
	}
	r.ID, r.DurationMs = t.ID, time.Since(start).Milliseconds()
	b.record(r)
}

// task runs t: its sandbox, setup, the agent and the test; the sandbox
// is removed before it returns.
func (b *batch) task(ctx context.Context, t batchTask) batchResult {
	infra := func(what string, err error) batchResult {
		return batchResult{Failure: failInfra, Message: what + ": " + safe(redactKey(err.Error(), b.key))}
	}
	req := wire.CreateSandbox{Image: t.Image, Name: b.sandboxName(t.ID)}
	sb, err := b.sbs.Create(ctx, req)
	if errors.Is(err, wire.ErrConflict) {
		// A sandbox of this batch's name for the task, which the sweep
		// did not see (a create of the killed run finishing late): ours.
		b.remove(req.Name)
		sb, err = b.sbs.Create(ctx, req)
	}
	if err != nil {
		if ctx.Err() != nil {
			// Cut off mid-create (Ctrl-C, --task-timeout): limbs serve may
			// finish it; the name is this batch's, remove what is there.
			b.remove(req.Name)
		}
		return infra("creating the sandbox of "+t.Image, err)
	}
	defer b.remove(sb.ID)
	r := batchResult{Sandbox: sb.ID}
	infra = func(what string, err error) batchResult {
		return batchResult{Failure: failInfra, Message: what + ": " + safe(redactKey(err.Error(), b.key)), Sandbox: sb.ID}
	}
	cl := b.sbs.Client().Sandbox(sb.ID)
	hctx, hcancel := context.WithTimeout(ctx, time.Minute)
	_, err = cl.Health(hctx)
	hcancel()
	if err != nil {
		return infra("reaching the sandbox", err)
	}
	sess, err := cl.CreateSession(ctx, wire.CreateSession{Name: "batch"})
	if err != nil {
		return infra("creating the session of setup and test", err)
	}
	if t.Setup != "" {
		code, out, err := runToEnd(ctx, cl, sess.ID, t.Setup)
		if err != nil {
			return infra("running setup", err)
		}
		if code != 0 {
			r.Failure, r.Message = failInfra, fmt.Sprintf("setup exited %d: %s", code, clipTail(out, 2000))
			return r
		}
	}
	if res, err := b.agentRun(ctx, t, cl); err != nil {
		return infra("starting the agent", err)
	} else {
		r.Reason, r.Message, r.Steps, r.Tokens = res.Reason, res.Message, res.Steps, res.Usage.Total()
	}
	if ctx.Err() != nil {
		return r
	}
	code, out, err := runToEnd(ctx, cl, sess.ID, t.Test)
	if err != nil {
		r.Failure, r.Message = failInfra, "running the test: "+safe(redactKey(err.Error(), b.key))
		return r
	}
	r.TestExit = &code
	r.Passed = code == 0
	if !r.Passed {
		switch r.Reason {
		case agent.MaxSteps, agent.MaxTokens, agent.MaxCost, agent.MaxTime:
			r.Failure = failLimit
		case agent.ModelError, agent.ContextFull:
			r.Failure = failModel
		case agent.ToolFailure:
			r.Failure = failInfra
		case agent.Finished:
			r.Failure = failTest
			r.Message = fmt.Sprintf("the test exited %d: %s", code, clipTail(out, 2000))
		default:
			r.Failure = failAgent
		}
	}
	return r
}

// agentRun runs the agent on t's instruction in the sandbox of cl, its
// transcript to OUT/ID.log.
func (b *batch) agentRun(ctx context.Context, t batchTask, cl *client.Client) (agent.Result, error) {
	sh := agent.NewShell(cl, tool.ShellOptions{Session: wire.CreateSession{Name: "agent"}})
	specs, err := tool.Profile(b.f.profile, sh, cl.FileStore())
	if err != nil {
		return agent.Result{}, err
	}
	lf, err := os.Create(filepath.Join(b.f.batch.out, t.ID+".log"))
	if err != nil {
		return agent.Result{}, err
	}
	defer lf.Close()
	fmt.Fprintf(lf, "> %s\n", t.Instruction)
	f := b.f
	return agent.Run(ctx, agent.Config{
		Model: f.model, BaseURL: f.baseURL, APIKey: b.key,
		Tools: specs, Shell: sh, System: b.system,
		Limits: f.limits, Prices: f.prices, ContextTokens: f.contextTokens,
		Observer: &agent.Printer{W: lf}, Logger: b.log.With("task", t.ID),
	}, t.Instruction)
}

// runToEnd runs command in session sid until it ends (bounded by ctx)
// and returns its exit code and the tail of its output.
func runToEnd(ctx context.Context, cl *client.Client, sid, command string) (int, string, error) {
	const poll = 60.0 // seconds a request waits before it returns "running"
	y := poll
	r, err := cl.Exec(ctx, sid, wire.Exec{Command: command, YieldAfter: &y})
	out := ""
	for i := 0; err == nil; i++ {
		// Only the tail is kept: a test that prints without end must not
		// fill the host's memory before --task-timeout.
		out += r.Output
		if len(out) > maxTestOutput {
			out = out[len(out)-maxTestOutput:]
		}
		if r.ExitCode != nil && r.Status != wire.StatusRunning {
			return *r.ExitCode, out, nil
		}
		if r.Status != wire.StatusRunning {
			return 0, out, fmt.Errorf("the command ended with status %q and no exit code", r.Status)
		}
		if i > 100_000 || ctx.Err() != nil {
			break
		}
		r, err = cl.Wait(ctx, sid, wire.Wait{YieldAfter: &y})
	}
	if err == nil {
		err = ctx.Err()
	}
	if ctx.Err() != nil {
		ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		_, _ = cl.Interrupt(ictx, sid, wire.Interrupt{})
		cancel()
	}
	return 0, out, err
}

// clipTail keeps the last n bytes of s.
func clipTail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return safe(s)
	}
	return safe("..." + s[len(s)-n:])
}

// redactKey removes the API key from s (a server's error may quote it).
func redactKey(s, key string) string {
	if len(key) < 4 {
		return s
	}
	return strings.ReplaceAll(s, key, "[the API key]")
}
