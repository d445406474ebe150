// Package agent is the ReAct loop of limbs: it gives a model the tools of
// internal/tool (a profile's set plus finish, the very Specs the MCP
// server serves, never a second definition) over the OpenAI chat
// completions wire protocol (github.com/openai/openai-go, streaming), and
// runs the calls the model makes in a sandbox until the model calls
// finish, a limit is reached, it is stuck, or its context is cancelled.
//
// One step is one model turn: a request (retried on 429 with its
// Retry-After, on 5xx, on a connection error and on a stream cut
// mid-response, with bounded exponential backoff and jitter), the text
// streamed to the Observer as it comes, then the tool calls: calls on
// different sessions run in parallel, calls on the same session (or on
// none: the file tools) in the order the model gave them. What the model
// got wrong (JSON that does not parse, a tool that does not exist,
// arguments of the wrong type) goes back to it as a tool error it can act
// on. A context-length error from the server shortens old observations
// (keeping the command id, so that shell_read brings any of them back)
// and sends the request again; the window is also kept below
// Config.ContextTokens before every request. The newest observations are
// never shortened.
//
// Stuck detection (stuck.go): the same action with the same observation
// three times in a row, the same error three times, or two actions
// alternating for six steps: first a note to the model, then, if it goes
// on, a stop with the reason. A wait on a command still running is not
// counted: waiting on a long build is work.
//
// Cancellation: the context ends the run; a command running at that
// moment is interrupted through the tool layer (Shell.Interrupt: SIGINT
// to its foreground job, then limbsd's escalation), so that the session
// is free afterwards. Use NewShell to get a Shell that does so.
//
// Every model request (its metadata), assistant message, tool call,
// observation and usage goes to Config.Observer, the hook an event log or
// a trajectory export plugs into; Printer is the one that writes a run to
// a terminal. The API key is never given to the Observer, and the errors
// the loop reports have it removed.
//
// Goroutines: Run's own, and during a step one per group of tool calls
// sharing a session. The Observer's calls never overlap (the results of
// parallel calls are handed to it as each ends, under one lock), so an
// Observer needs no lock of its own for one Run.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/limbs-dev/limbs/internal/tool"
)

// StopReason says why a run ended.
type StopReason string

// The reasons a run ends.
const (
	Finished    StopReason = "finished"      // the model called finish
	MaxSteps    StopReason = "max_steps"     // Limits.Steps model turns
	MaxTokens   StopReason = "max_tokens"    // Limits.Tokens used
	MaxCost     StopReason = "max_cost"      // Limits.Cost spent
	MaxTime     StopReason = "max_time"      // Limits.Time passed
	Cancelled   StopReason = "cancelled"     // the context was cancelled (Ctrl-C)
	Stuck       StopReason = "stuck"         // repeating itself after a note
	NoToolCalls StopReason = "no_tool_calls" // answered twice without calling a tool
	ModelError  StopReason = "model_error"   // the server refused, or kept failing
	ContextFull StopReason = "context_full"  // too long even with every old observation shortened
	ToolFailure StopReason = "tool_failure"  // the sandbox could not be reached
)

// Limits bound a run. Zero fields take the defaults (DefaultLimits);
// Cost bounds only when Prices are given.
type Limits struct {
	Steps  int           // model turns
	Tokens int64         // prompt plus completion tokens, summed over the run
	Cost   float64       // in the currency of Prices
	Time   time.Duration // wall time of the run
}

// Bounds of one model answer: what a server sends beyond them is not
// taken (a model or a server gone wrong must not fill the host's memory,
// the sandbox or the event log).
const (
	// MaxCalls is the most tool calls of one answer that run; the
	// others get a tool error saying so.
	MaxCalls = 64
	// MaxAnswer is the most bytes of one answer (its text, tool names
	// and arguments); the stream is cut there and the model told.
	MaxAnswer = 4 << 20
)

// DefaultLimits are the limits of a run that sets none.
var DefaultLimits = Limits{Steps: 100, Tokens: 5_000_000, Time: time.Hour}

// Prices are per million tokens; zero: no cost is counted.
type Prices struct {
	Input, Output float64
}

// Retry bounds the retries of one model request.
type Retry struct {
	// Attempts is the most requests per step (first included); 0: 6.
	Attempts int
	// Base is the first backoff, doubled each attempt; 0: 1 s.
	Base time.Duration
	// MaxWait caps one wait, a Retry-After included; 0: 2 min.
	MaxWait time.Duration
	// Timeout bounds one request, its whole stream included (a server
	// that stops sending is retried); 0: 10 min.
	Timeout time.Duration
}

// Config configures Run.
type Config struct {
	Model   string
	BaseURL string // the server's base URL (…/v1); empty: OpenAI's
	// APIKey is sent as a bearer token; it is never logged, printed or
	// given to the Observer. Empty: no Authorization header.
	APIKey string
	// HTTPClient is the client requests go through; nil: a default one.
	HTTPClient *http.Client
	// Tools are the tools the model gets (tool.Profile); finish is added
	// when they lack it.
	Tools []tool.Spec
	// Shell is the Shell the tools run on, to interrupt a running
	// command when the run is cancelled (may be nil: no interrupt).
	Shell *tool.Shell
	// System is the system prompt; empty: DefaultSystem.
	System string
	Limits Limits
	Prices Prices
	// ContextTokens is the window kept (estimated at 4 characters a
	// token); 0: 100,000.
	ContextTokens int
	// Approve, when set, is asked before each call of a tool that is not
	// read-only; nil runs every call (--approve auto).
	Approve Approver
	// Observer receives the run as it happens; nil: none.
	Observer Observer
	Retry    Retry
	// Sleep waits d or until ctx ends (the retry waits); nil: a timer.
	// Tests record the waits through it.
	Sleep func(ctx context.Context, d time.Duration) error
	// Logger gets what an operator needs (retries, errors); nil: none.
	Logger *slog.Logger
}

// DefaultSystem is the system prompt of a run that gives none.
const DefaultSystem = `You are an agent working in a sandbox: a Linux machine with persistent bash sessions. ` +
	`Use the tools to carry out the task: run commands, read their output and exit codes, edit files, and check your work (run the tests). ` +
	`Every tool result ends with a fact block in brackets: the exit code, the cwd, whether the command still runs. ` +
	`Call one tool or several in a turn; calls on different sessions run in parallel. ` +
	`When the task is done, or cannot be done, call finish with a message saying what you did and what the result is.`

// Usage is the token count of a run or of one request.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

// Total is prompt plus completion tokens.
func (u Usage) Total() int64 { return u.PromptTokens + u.CompletionTokens }

// Result is how a run ended.
type Result struct {
	Reason StopReason `json:"reason"`
	// Message is finish's message, or what stopped the run, in words a
	// person reads.
	Message string  `json:"message"`
	Steps   int     `json:"steps"`
	Usage   Usage   `json:"usage"`
	Cost    float64 `json:"cost,omitempty"`
	// Duration is the run's wall time.
	Duration time.Duration `json:"duration"`
}

// ToolCall is one call the model made.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"` // as the model sent them
}

// Observation is the result of one call, as the model gets it.
type Observation struct {
	Text    string `json:"text"`
	IsError bool   `json:"is_error,omitempty"`
	// Structured is the tool's structured result (nil for the loop's own
	// refusals).
	Structured any `json:"structured,omitempty"`
	// Refused: the person running the agent did not allow the call.
	Refused bool `json:"refused,omitempty"`
}

// Run carries out task with the model and tools of cfg and returns how it
// ended. The error is for a configuration that cannot run (no model, no
// tools); everything that happens during the run is in the Result.
// A batch runner calls Run once per task, with that task's tools.
func Run(ctx context.Context, cfg Config, task string) (Result, error) {
	r, err := newRun(cfg)
	if err != nil {
		return Result{}, err
	}
	return r.run(ctx, task), nil
}

func newRun(cfg Config) (*run, error) {
	if cfg.Model == "" {
		return nil, errors.New("agent: no model: give the model name (--model)")
	}
	if len(cfg.Tools) == 0 {
		return nil, errors.New("agent: no tools")
	}
	hasFinish := false
	for _, s := range cfg.Tools {
		hasFinish = hasFinish || s.Name == tool.FinishName
	}
	if !hasFinish {
		cfg.Tools = append(append([]tool.Spec(nil), cfg.Tools...), tool.FinishSpec())
	}
	l := &cfg.Limits
	if l.Steps <= 0 {
		l.Steps = DefaultLimits.Steps
	}
	if l.Tokens <= 0 {
		l.Tokens = DefaultLimits.Tokens
	}
	if l.Time <= 0 {
		l.Time = DefaultLimits.Time
	}
	if cfg.ContextTokens <= 0 {
		cfg.ContextTokens = 100_000
	}
	if cfg.Retry.Attempts <= 0 {
		cfg.Retry.Attempts = 6
	}
	if cfg.Retry.Base <= 0 {
		cfg.Retry.Base = time.Second
	}
	if cfg.Retry.MaxWait <= 0 {
		cfg.Retry.MaxWait = 2 * time.Minute
	}
	if cfg.Retry.Timeout <= 0 {
		cfg.Retry.Timeout = 10 * time.Minute
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.System == "" {
		cfg.System = DefaultSystem
	}
	if cfg.Observer == nil {
		cfg.Observer = Nop{}
	}
	r := &run{cfg: cfg, specs: map[string]tool.Spec{}}
	for _, s := range cfg.Tools {
		r.specs[s.Name] = s
	}
	r.model = newModel(cfg)
	return r, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run is the state of one Run.
type run struct {
	cfg   Config
	specs map[string]tool.Spec
	model *model

	msgs      []message
	usage     Usage
	steps     int
	stuck     stuckDetector
	start     time.Time
	noTool    int  // consecutive turns without a tool call
	toolFails int  // consecutive steps with a call that could not be carried out
	estimated bool // the server sent no usage once: told in a note
}

func (r *run) cost() float64 {
	p := r.cfg.Prices
	return float64(r.usage.PromptTokens)*p.Input/1e6 + float64(r.usage.CompletionTokens)*p.Output/1e6
}

func (r *run) run(parent context.Context, task string) Result {
	r.start = time.Now()
	ctx, cancel := context.WithTimeout(parent, r.cfg.Limits.Time)
	defer cancel()
	r.msgs = []message{{role: "system", text: r.cfg.System}, {role: "user", text: task}}
	res := r.loop(ctx, parent)
	res.Steps, res.Usage, res.Duration = r.steps, r.usage, time.Since(r.start)
	if r.cfg.Prices != (Prices{}) {
		res.Cost = r.cost()
	}
	res.Message = redact(res.Message, r.cfg.APIKey)
	r.cfg.Observer.Stop(res)
	return res
}

// ended is the Result of a run whose context ended: the user's cancel,
// or the wall-time limit.
func (r *run) ended(parent context.Context) Result {
	if parent.Err() != nil {
		return Result{Reason: Cancelled, Message: "the run was cancelled (interrupted by the user); a command that was running was interrupted"}
	}
	return Result{Reason: MaxTime, Message: fmt.Sprintf("the run reached its time limit of %s (--max-time)", r.cfg.Limits.Time)}
}

func (r *run) loop(ctx, parent context.Context) Result {
	for {
		if ctx.Err() != nil {
			return r.ended(parent)
		}
		l := r.cfg.Limits
		switch {
		case r.steps >= l.Steps:
			return Result{Reason: MaxSteps, Message: fmt.Sprintf("the run reached its limit of %d steps (--max-steps) without the model calling finish", l.Steps)}
		case r.usage.Total() >= l.Tokens:
			return Result{Reason: MaxTokens, Message: fmt.Sprintf("the run used %d tokens, its limit is %d (--max-tokens)", r.usage.Total(), l.Tokens)}
		case l.Cost > 0 && r.cfg.Prices != (Prices{}) && r.cost() >= l.Cost:
			return Result{Reason: MaxCost, Message: fmt.Sprintf("the run cost %.4f, its limit is %.4f (--max-cost)", r.cost(), l.Cost)}
		}
		r.steps++
		turn, stop := r.ask(ctx, parent)
		if stop != nil {
			return *stop
		}
		if len(turn.calls) == 0 {
			r.noTool++
			if r.noTool >= 2 {
				return Result{Reason: NoToolCalls, Message: "the model answered twice without calling a tool (not even finish); its last answer: " + clip(turn.text, 2000)}
			}
			if turn.oversize {
				// (With calls, each call's error says it.)
				r.note(fmt.Sprintf("Your answer passed %d bytes and was cut there. Send shorter answers, and carry on with the task using the tools.", MaxAnswer))
				continue
			}
			r.note("You answered without calling a tool. Carry on with the task using the tools, and call finish with a message when it is done.")
			continue
		}
		r.noTool = 0
		done, stop := r.act(ctx, parent, turn)
		if stop != nil {
			return *stop
		}
		if done != nil {
			return *done
		}
	}
}

// note adds a message from the loop to the model (a user message) and
// tells the Observer.
func (r *run) note(text string) {
	r.msgs = append(r.msgs, message{role: "user", text: "[limbs agent] " + text})
	r.cfg.Observer.Note(r.steps, text)
}

// redact removes key from s.
func redact(s, key string) string {
	if key == "" || len(key) < 4 {
		return s
	}
	return strings.ReplaceAll(s, key, "[the API key]")
}

// clip keeps the first n bytes of s (at a rune boundary).
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "..."
}

// sessionOf is the session a call acts on, for the order of parallel
// calls: its "session" argument ("" the default session, and every tool
// without one).
func sessionOf(args string) string {
	var a struct {
		Session any `json:"session"`
	}
	if json.Unmarshal([]byte(args), &a) != nil {
		return ""
	}
	s, _ := a.Session.(string)
	return s
}
