package main

// limbs replay --agent: a run of limbs agent shown step by step, from the
// agent.* events of a sandbox's log, a --record file or an ATIF export
// (docs/agent.md, "Replaying a run").

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/charmbracelet/x/term"

	"github.com/limbs-dev/limbs/internal/atif"
	"github.com/limbs-dev/limbs/internal/cast"
	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Bounds of reading a run from a file (--file).
const (
	// maxReplayFile is the most bytes of a file read.
	maxReplayFile = 1 << 30
	// maxReplayLine is the most bytes of one event (a JSON line).
	maxReplayLine = 64 << 20
)

// replayKind is what one item of a replayed run shows.
type replayKind int

const (
	itemStep  replayKind = iota // a step begins (its first model request)
	itemText                    // the model's text of the step
	itemCall                    // a tool call, with its arguments
	itemObs                     // the result of a call
	itemUsage                   // the tokens of the step's requests
	itemNote                    // what the loop did or told the model
	itemEnd                     // how the run ended
)

// replayItem is one thing a replay shows, at the time it happened.
type replayItem struct {
	at    time.Time
	step  int
	kind  replayKind
	text  string // itemText, itemNote
	call  wire.AgentCallData
	obs   wire.AgentObservationData
	usage wire.AgentUsageData
	end   *wire.AgentFinishedData // itemEnd; nil: the run has no end in the log
}

// agentRun is one run of limbs agent, as a replay shows it.
type agentRun struct {
	run, model   string
	system, task string
	start        time.Time
	items        []replayItem
	steps        int // the number of steps (model turns) shown
}

// buildAgentRun picks the run of limbs agent run (the last one when
// empty) out of events, in their order: the step headers, the model's
// text, each call, each observation, the tokens (at the end of their
// step) and the end.
func buildAgentRun(events []wire.Event, run string) (*agentRun, error) {
	runs := atif.Runs(events)
	if len(runs) == 0 {
		return nil, errors.New("no run of limbs agent in its events: a run is recorded in the log of a sandbox of limbs serve (limbs agent --sandbox or --image), or with limbs agent --record FILE")
	}
	if run == "" {
		run = runs[len(runs)-1]
	} else if !slices.Contains(runs, run) {
		return nil, fmt.Errorf("no run %q of limbs agent in its events; its runs: %s", safe(run), safe(strings.Join(runs, ", ")))
	}
	r := &agentRun{run: run}
	step := 0
	var usage *replayItem // the tokens of the current step, shown at its end
	shown := map[string]bool{}
	// The tokens line comes when the step's last item did, not with the
	// next step (after its pause).
	flush := func() {
		if usage != nil {
			usage.at = r.start
			if n := len(r.items); n > 0 {
				usage.at = r.items[n-1].at
			}
			r.items = append(r.items, *usage)
			usage = nil
		}
	}
	enter := func(at time.Time, s int) {
		if s > step {
			flush()
			step = s
			clear(shown)
			r.items = append(r.items, replayItem{at: at, step: s, kind: itemStep})
		}
	}
	for _, e := range events {
		if e.Source != wire.SourceAgent || len(e.Data) == 0 {
			continue
		}
		var head struct {
			Run  string `json:"run"`
			Step int    `json:"step"`
		}
		if json.Unmarshal(e.Data, &head) != nil || head.Run != run {
			continue
		}
		if r.start.IsZero() {
			r.start = e.Time
		}
		at := e.Time
		if at.Before(r.start) {
			at = r.start // a clock that ran back, or a forged time
		}
		switch e.Type {
		case wire.EventAgentRequest:
			var d wire.AgentRequestData
			if json.Unmarshal(e.Data, &d) == nil {
				if r.model == "" {
					r.model = d.Model
				}
				enter(at, d.Step)
			}
		case wire.EventAgentMessage:
			var d wire.AgentMessageData
			if json.Unmarshal(e.Data, &d) != nil {
				continue
			}
			switch d.Role {
			case "system":
				r.system = d.Text
			case "user":
				r.task = d.Text
			case "note":
				r.items = append(r.items, replayItem{at: at, step: step, kind: itemNote, text: d.Text})
			case "assistant":
				enter(at, d.Step)
				if r.model == "" {
					r.model = d.Model
				}
				if d.Text != "" {
					r.items = append(r.items, replayItem{at: at, step: step, kind: itemText, text: d.Text})
				}
				for _, c := range d.Calls {
					shown[c.ID] = true
					r.items = append(r.items, replayItem{at: at, step: step, kind: itemCall, call: c})
				}
			}
		case wire.EventAgentToolCall:
			// The assistant message lists the calls already; a call is
			// shown from here only when that message is not in the log.
			var d wire.AgentCallData
			if json.Unmarshal(e.Data, &d) == nil && !shown[d.ID] {
				enter(at, d.Step)
				shown[d.ID] = true
				r.items = append(r.items, replayItem{at: at, step: step, kind: itemCall, call: d})
			}
		case wire.EventAgentObservation:
			var d wire.AgentObservationData
			if json.Unmarshal(e.Data, &d) == nil {
				enter(at, d.Step)
				r.items = append(r.items, replayItem{at: at, step: step, kind: itemObs, obs: d})
			}
		case wire.EventAgentUsage:
			var d wire.AgentUsageData
			if json.Unmarshal(e.Data, &d) == nil {
				enter(at, d.Step)
				if usage == nil {
					usage = &replayItem{step: step, kind: itemUsage}
				}
				// A retried request's tokens count for the step too.
				usage.usage.PromptTokens += d.PromptTokens
				usage.usage.CompletionTokens += d.CompletionTokens
			}
		case wire.EventAgentFinished:
			var d wire.AgentFinishedData
			if json.Unmarshal(e.Data, &d) == nil {
				flush()
				r.items = append(r.items, replayItem{at: at, step: step, kind: itemEnd, end: &d})
			}
		}
	}
	flush()
	last := r.start
	if n := len(r.items); n > 0 {
		last = r.items[n-1].at
	}
	if n := len(r.items); n == 0 || r.items[n-1].kind != itemEnd {
		r.items = append(r.items, replayItem{at: last, step: step, kind: itemEnd})
	}
	r.steps = step
	return r, nil
}

// readRunFile reads the events of a run from path: JSON lines of events
// (limbs agent --record, limbs export --format jsonl), or an ATIF
// trajectory (limbs export --format atif), which becomes the same items.
func readRunFile(path, run string) (*agentRun, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--file: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > maxReplayFile {
		return nil, fmt.Errorf("--file %s: %d bytes, more than the %d a replay reads; cut the events of one run out of it (limbs events --type 'agent.*')", path, st.Size(), maxReplayFile)
	}
	br := bufio.NewReader(io.LimitReader(f, maxReplayFile))
	head, _ := br.Peek(4096)
	if bytes.Contains(head, []byte(`"schema_version"`)) && bytes.Contains(head, []byte(`"ATIF-`)) {
		var t atif.Trajectory
		dec := json.NewDecoder(br)
		if err := dec.Decode(&t); err != nil {
			return nil, fmt.Errorf("--file %s: not an ATIF trajectory: %v", path, err)
		}
		return runFromATIF(&t)
	}
	var events []wire.Event
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 64<<10), maxReplayLine)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var e wire.Event
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("--file %s:%d: not an event (a JSON line of limbs agent --record or limbs export --format jsonl): %v", path, n, err)
		}
		events = append(events, e)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("--file %s: a line is longer than %d bytes: not the events of limbs agent --record", path, maxReplayLine)
		}
		return nil, fmt.Errorf("--file %s: %w", path, err)
	}
	r, err := buildAgentRun(events, run)
	if err != nil {
		return nil, fmt.Errorf("--file %s: %w", path, err)
	}
	return r, nil
}

// runFromATIF turns an ATIF trajectory (limbs' own export, or another
// agent's) into the items of a replay.
func runFromATIF(t *atif.Trajectory) (*agentRun, error) {
	r := &agentRun{run: t.SessionID, model: t.Agent.ModelName}
	turn := 0
	var last time.Time
	for _, s := range t.Steps {
		at, err := time.Parse(time.RFC3339Nano, s.Timestamp)
		if err != nil || at.Before(last) {
			at = last
		}
		if r.start.IsZero() {
			r.start = at
		}
		last = at
		switch {
		case s.Source == "system" && s.Extra["limbs_note"] == true:
			r.items = append(r.items, replayItem{at: at, step: turn, kind: itemNote, text: s.Message})
		case s.Source == "system" && r.system == "" && turn == 0:
			r.system = s.Message
		case s.Source == "user" && r.task == "" && turn == 0:
			r.task = s.Message
		case s.Source == "system", s.Source == "user":
			r.items = append(r.items, replayItem{at: at, step: turn, kind: itemNote, text: s.Source + ": " + s.Message})
		default: // agent
			turn++
			r.items = append(r.items, replayItem{at: at, step: turn, kind: itemStep})
			if s.Message != "" {
				r.items = append(r.items, replayItem{at: at, step: turn, kind: itemText, text: s.Message})
			}
			names := map[string]string{}
			for _, c := range s.ToolCalls {
				var buf bytes.Buffer
				enc := json.NewEncoder(&buf)
				enc.SetEscapeHTML(false)
				_ = enc.Encode(c.Arguments)
				args := bytes.TrimSpace(buf.Bytes())
				if raw, ok := c.Extra["raw_arguments"].(string); ok {
					args = []byte(raw)
				}
				names[c.ID] = c.Name
				r.items = append(r.items, replayItem{at: at, step: turn, kind: itemCall, call: wire.AgentCallData{ID: c.ID, Name: c.Name, Arguments: string(args)}})
			}
			if s.Observation != nil {
				for _, res := range s.Observation.Results {
					r.items = append(r.items, replayItem{at: at, step: turn, kind: itemObs, obs: atifObs(res, names)})
				}
			}
			if s.Metrics != nil {
				r.items = append(r.items, replayItem{at: at, step: turn, kind: itemUsage, usage: wire.AgentUsageData{PromptTokens: s.Metrics.PromptTokens, CompletionTokens: s.Metrics.CompletionTokens}})
			}
		}
	}
	if len(r.items) == 0 && r.task == "" {
		return nil, errors.New("the trajectory has no steps")
	}
	end := replayItem{at: last, step: turn, kind: itemEnd}
	if f := t.FinalMetrics; f != nil {
		if reason, ok := f.Extra["stop_reason"].(string); ok && !strings.HasPrefix(reason, "unknown") {
			d := &wire.AgentFinishedData{Reason: reason, Steps: turn, PromptTokens: f.PromptTokens, CompletionTokens: f.CompletionTokens}
			d.Message, _ = f.Extra["stop_message"].(string)
			if ms, ok := f.Extra["duration_ms"].(float64); ok {
				d.DurationMs = int64(ms)
			}
			end.end = d
		}
	}
	r.items = append(r.items, end)
	r.steps = turn
	return r, nil
}

// atifObs is an ATIF observation result as limbs' observation data.
func atifObs(res atif.Result, names map[string]string) wire.AgentObservationData {
	d := wire.AgentObservationData{CallID: res.SourceCallID, Text: res.Content, Name: names[res.SourceCallID]}
	x := res.Extra
	if n, ok := x["tool"].(string); ok {
		d.Name = n
	}
	d.IsError, _ = x["is_error"].(bool)
	d.Refused, _ = x["refused"].(bool)
	d.Session, _ = x["session"].(string)
	d.Command, _ = x["command_id"].(string)
	d.Status, _ = x["status"].(string)
	if c, ok := x["exit_code"].(float64); ok {
		code := int(c)
		d.ExitCode = &code
	}
	if b, ok := x["output_bytes"].(float64); ok {
		d.OutputBytes = int64(b)
	}
	if l, ok := x["shown_bytes"].([]any); ok {
		for _, p := range l {
			if pair, ok := p.([]any); ok && len(pair) == 2 {
				from, _ := pair[0].(float64)
				to, _ := pair[1].(float64)
				d.Shown = append(d.Shown, [2]int64{int64(from), int64(to)})
			}
		}
	}
	return d
}

// safeText is s as it may be printed on the operator's terminal over
// several lines: like safe, every control character (carriage return
// and escape included), DEL, C1 control, invalid UTF-8 byte and format
// character is shown as a visible escape, but newlines and tabs stay.
func safeText(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		parts := strings.Split(l, "\t")
		for j, p := range parts {
			parts[j] = safe(p)
		}
		lines[i] = strings.Join(parts, "\t")
	}
	return strings.Join(lines, "\n")
}

// indent puts prefix before each line of s.
func indent(s, prefix string) string {
	s = strings.TrimRight(s, "\n")
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// clipBytes keeps the first n bytes of s (0: all), at a rune boundary,
// and says how many it left out.
func clipBytes(s string, n int) string {
	if n <= 0 || len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + fmt.Sprintf("\n[... %d more bytes; --max-observation 0 shows all]", len(s)-cut)
}

// replayRender writes the items of a run as text.
type replayRender struct {
	run *agentRun
	max int // bytes of an observation or arguments shown; 0: all
	// tokens so far, for the usage lines.
	prompt, completion int64
}

// header is what comes before the first step: the run, the model, the
// system prompt (its start) and the task.
func (rr *replayRender) header() string {
	r := rr.run
	var b strings.Builder
	fmt.Fprintf(&b, "== run %s of limbs agent", safe(r.run))
	if r.model != "" {
		fmt.Fprintf(&b, ", model %s", safe(r.model))
	}
	if !r.start.IsZero() {
		fmt.Fprintf(&b, ", %s", r.start.UTC().Format("2006-01-02 15:04:05 UTC"))
	}
	fmt.Fprintf(&b, ", %d steps\n", r.steps)
	if r.system != "" {
		sys := strings.Join(strings.Fields(r.system), " ")
		if len(sys) > 160 {
			sys = clip160(sys) + fmt.Sprintf(" [%d characters]", len(r.system))
		}
		fmt.Fprintf(&b, "[system: %s]\n", safe(sys))
	}
	fmt.Fprintf(&b, "> %s\n", indentRest(safeText(r.task), "  "))
	return b.String()
}

func clip160(s string) string {
	n := 160
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "..."
}

// indentRest indents every line of s but the first.
func indentRest(s, prefix string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+prefix)
}

// item is the text of one item.
func (rr *replayRender) item(it replayItem) string {
	switch it.kind {
	case itemStep:
		return fmt.Sprintf("\n## step %d  (+%s)\n", it.step, it.at.Sub(rr.run.start).Round(100*time.Millisecond))
	case itemText:
		return safeText(strings.TrimRight(it.text, "\n")) + "\n"
	case itemCall:
		return fmt.Sprintf("$ %s %s  [%s]\n", safe(it.call.Name), safe(clipBytes(it.call.Arguments, rr.max)), safe(it.call.ID))
	case itemObs:
		return rr.observation(it.obs)
	case itemUsage:
		rr.prompt += it.usage.PromptTokens
		rr.completion += it.usage.CompletionTokens
		return fmt.Sprintf("(tokens: %d prompt + %d completion; %d in the run so far)\n", it.usage.PromptTokens, it.usage.CompletionTokens, rr.prompt+rr.completion)
	case itemNote:
		return fmt.Sprintf("[limbs agent: %s]\n", indentRest(safeText(it.text), "  "))
	case itemEnd:
		d := it.end
		if d == nil {
			return "\n== the events hold no end of this run: it was killed, it still runs, or the log lost its end\n"
		}
		how := "finished"
		if d.Reason != "finished" {
			how = "stopped (" + safe(d.Reason) + ")"
		}
		return fmt.Sprintf("\n== %s after %d steps (%d tokens, %s): %s\n", how, d.Steps, d.PromptTokens+d.CompletionTokens,
			(time.Duration(d.DurationMs) * time.Millisecond).Round(100*time.Millisecond), indentRest(safeText(d.Message), "   "))
	}
	return ""
}

// observation is the text of a result: whose it is, the command it
// showed (id, session, exit code, byte ranges), then the text the model
// got.
func (rr *replayRender) observation(o wire.AgentObservationData) string {
	var b strings.Builder
	fmt.Fprintf(&b, "-> %s [%s]", safe(o.Name), safe(o.CallID))
	if o.Command != "" {
		fmt.Fprintf(&b, " %s in session %s", safe(o.Command), safe(o.Session))
		switch {
		case o.ExitCode != nil:
			fmt.Fprintf(&b, ", exit %d", *o.ExitCode)
		case o.Status != "":
			fmt.Fprintf(&b, ", %s", safe(o.Status))
		}
		if len(o.Shown) > 0 {
			var rs []string
			for _, p := range o.Shown {
				rs = append(rs, fmt.Sprintf("%d-%d", p[0], p[1]))
			}
			fmt.Fprintf(&b, ", showed bytes %s of %d", strings.Join(rs, ","), o.OutputBytes)
		}
	}
	switch {
	case o.Refused:
		b.WriteString(", refused by the person running it")
	case o.IsError:
		b.WriteString(", an error for the model")
	}
	b.WriteString("\n")
	if o.Text != "" {
		b.WriteString(indent(safeText(clipBytes(o.Text, rr.max)), "   "))
		b.WriteString("\n")
	}
	return b.String()
}

// Keys of an agent replay read from a terminal.
const (
	replayNext     = 'n' // and space: the rest of this step now
	replayContinue = 'c' // at a --step pause: play on without pausing
)

// replayPlayer writes a run on its schedule, or all at once.
type replayPlayer struct {
	w       io.Writer
	speed   float64
	maxIdle time.Duration
	// timed: pause as recorded (scaled); false: write it all at once.
	timed bool
	// stepwise: after each step, wait for a key (needs keys).
	stepwise bool
	// wait waits d (forever when d < 0) or until a key comes; it returns
	// the key (0 when d passed) or ctx's error.
	wait func(ctx context.Context, d time.Duration) (byte, error)
	// prompt writes (and clears, with "") the --step prompt.
	prompt func(string)
}

// errQuit is a replay the user stopped.
var errQuit = errors.New("stopped")

func (p *replayPlayer) play(ctx context.Context, rr *replayRender) error {
	r := rr.run
	if _, err := io.WriteString(p.w, rr.header()); err != nil {
		return err
	}
	speed := p.speed
	if speed <= 0 {
		speed = 1
	}
	prev := r.start
	skip := false // the user asked for the rest of this step now
	for i, it := range r.items {
		if it.kind == itemStep {
			skip = false
			if p.stepwise && i > 0 {
				if err := p.pause(ctx, it.step-1, r.steps); err != nil {
					return err
				}
				prev = it.at // a pause replaces the recorded one
			}
		}
		gap := it.at.Sub(prev)
		prev = it.at
		if p.timed && !skip && gap > 0 {
			if p.maxIdle > 0 && gap > p.maxIdle {
				gap = p.maxIdle
			}
			k, err := p.wait(ctx, time.Duration(float64(gap)/speed))
			if err != nil {
				return err
			}
			switch k {
			case replayQuit, replayCtrlC:
				return errQuit
			case replayNext, ' ':
				skip = true
			}
		}
		if _, err := io.WriteString(p.w, rr.item(it)); err != nil {
			return err
		}
	}
	return nil
}

// pause waits at the end of step for the key that goes on.
func (p *replayPlayer) pause(ctx context.Context, step, steps int) error {
	p.prompt(fmt.Sprintf("-- end of step %d of %d: space or n: the next step, c: play on, q: quit --", step, steps))
	defer p.prompt("")
	for range 1 << 20 {
		k, err := p.wait(ctx, -1)
		if err != nil {
			return err
		}
		switch k {
		case replayQuit, replayCtrlC:
			return errQuit
		case replayNext, ' ':
			return nil
		case replayContinue:
			p.stepwise = false
			return nil
		}
	}
	return nil
}

// crlf writes "\n" as "\r\n": a terminal in raw mode does not return the
// carriage by itself.
type crlf struct{ w io.Writer }

func (c crlf) Write(b []byte) (int, error) {
	if _, err := c.w.Write(bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n"))); err != nil {
		return 0, err
	}
	return len(b), nil
}

// agentReplayFlags are the flags of limbs replay --agent.
type agentReplayFlags struct {
	agent     bool
	run, file string
	step, all bool
	max       int
}

func addAgentReplayFlags(fs *flag.FlagSet) *agentReplayFlags {
	f := &agentReplayFlags{}
	fs.BoolVar(&f.agent, "agent", false, "show the run of limbs agent in the sandbox's log step by step, instead of a session's terminal")
	fs.StringVar(&f.run, "run", "", "--agent: the run (its session name, agent-...; default: the last run in the log)")
	fs.StringVar(&f.file, "file", "", "--agent from a file instead of limbs serve: the JSON lines of limbs agent --record or limbs export --format jsonl, or limbs export --format atif")
	fs.BoolVar(&f.step, "step", false, "--agent: stop after each step until a key (space or n: next, c: play on, q: quit)")
	fs.BoolVar(&f.all, "all", false, "--agent: write it all at once, without its pauses (the default when the output is not a terminal)")
	fs.IntVar(&f.max, "max-observation", 4000, "--agent: bytes of each result and arguments shown (0: all)")
	return f
}

// on: an agent replay was asked for.
func (f *agentReplayFlags) on() bool {
	return f.agent || f.run != "" || f.file != "" || f.step || f.all
}

// parseReplayArgs parses limbs replay's flags and its sandbox, which
// --file replaces.
func parseReplayArgs(fs *flag.FlagSet, args []string, af *agentReplayFlags) (string, error) {
	if err := parse(fs, args); err != nil {
		return "", err
	}
	sandbox := ""
	if fs.NArg() > 0 {
		sandbox = fs.Arg(0)
		if err := parse(fs, fs.Args()[1:]); err != nil {
			return "", err
		}
		if fs.NArg() > 0 {
			return "", usageError{fmt.Sprintf("unexpected arguments %q: name only the sandbox (its id or name)", fs.Args())}
		}
	}
	switch {
	case sandbox == "" && af.file == "":
		return "", usageError{"name the sandbox (its id or name), or give --file with the events of a run"}
	case sandbox != "" && af.file != "":
		return "", usageError{"give the sandbox or --file, not both"}
	case af.step && af.all:
		return "", usageError{"--step stops after each step, --all writes it all at once: give one"}
	case af.max < 0:
		return "", usageError{"--max-observation: give a number of bytes, 0 for all"}
	}
	return sandbox, nil
}

// agentReplay is limbs replay --agent: the run from the sandbox's log
// (or af.file), played on stdout.
func agentReplay(ctx context.Context, cc *controlConn, sandbox string, af *agentReplayFlags, po cast.PlayOptions, stdin, stdout *os.File) error {
	var r *agentRun
	var err error
	if af.file != "" {
		r, err = readRunFile(af.file, af.run)
	} else {
		var c *client.Sandboxes
		if c, err = cc.client(); err != nil {
			return err
		}
		var events []wire.Event
		if events, err = fetchEvents(ctx, c.Client(), sandbox, 0); err != nil {
			return err
		}
		if r, err = buildAgentRun(events, af.run); err != nil {
			err = fmt.Errorf("sandbox %s: %w", safe(sandbox), err)
		}
	}
	if err != nil {
		return err
	}
	inTTY, outTTY := term.IsTerminal(stdin.Fd()), term.IsTerminal(stdout.Fd())
	if af.step && !inTTY {
		return usageError{"--step reads its keys from a terminal: run it in one, or use --all"}
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	p := &replayPlayer{w: stdout, speed: po.Speed, maxIdle: po.MaxIdle, timed: outTTY && !af.all, stepwise: af.step}
	keys := make(chan byte, 64)
	if inTTY && (p.timed || p.stepwise) {
		// Raw, so that a key acts without Enter; keys are read, never
		// sent anywhere.
		state, err := term.MakeRaw(stdin.Fd())
		if err != nil {
			return fmt.Errorf("raw mode: %w", err)
		}
		defer term.Restore(stdin.Fd(), state)
		if outTTY {
			p.w = crlf{stdout}
		}
		go func() {
			b := make([]byte, 64)
			for {
				n, err := stdin.Read(b)
				for _, k := range b[:n] {
					select {
					case keys <- k:
					default: // keys typed faster than they are used
					}
				}
				if err != nil || ctx.Err() != nil {
					return
				}
			}
		}()
	}
	p.wait = func(ctx context.Context, d time.Duration) (byte, error) {
		var after <-chan time.Time
		if d >= 0 {
			t := time.NewTimer(d)
			defer t.Stop()
			after = t.C
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-after:
			return 0, nil
		case k := <-keys:
			return k, nil
		}
	}
	promptTo := io.Writer(os.Stderr)
	if outTTY {
		promptTo = stdout
	}
	p.prompt = func(s string) {
		if s == "" {
			s = "\r\x1b[K"
		}
		_, _ = io.WriteString(promptTo, s)
	}
	err = p.play(ctx, &replayRender{run: r, max: af.max})
	if errors.Is(err, errQuit) || errors.Is(err, context.Canceled) {
		if outTTY {
			_, _ = io.WriteString(stdout, "\r\n")
		}
		return nil
	}
	return err
}
