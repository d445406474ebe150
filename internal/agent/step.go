package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/limbs-dev/limbs/internal/tool"
)

// RequestInfo is the metadata of one model request (never the key, nor
// the messages themselves: the Observer got those as they were made).
type RequestInfo struct {
	Step     int    `json:"step"`
	Attempt  int    `json:"attempt"` // 1 for the first request of a step
	Model    string `json:"model"`
	Host     string `json:"host"` // the server's host[:port]
	Messages int    `json:"messages"`
	Chars    int    `json:"chars"` // of the messages, as sent
	Tools    int    `json:"tools"`
}

// maxShrinks is how many context-length errors one step survives.
const maxShrinks = 4

// ask gets the model's next turn, retrying what can be retried.
func (r *run) ask(ctx, parent context.Context) (turn, *Result) {
	r.fit(r.budget())
	shrinks := 0
	for attempt := 1; ; attempt++ {
		info := RequestInfo{Step: r.steps, Attempt: attempt, Model: r.cfg.Model, Host: r.model.host, Messages: len(r.msgs), Chars: r.chars(), Tools: len(r.cfg.Tools)}
		r.cfg.Observer.Request(info)
		actx, cancel := context.WithTimeout(ctx, r.cfg.Retry.Timeout)
		t, err := r.model.stream(actx, r.model.params(r.cfg.Model, r.msgs), func(s string) { r.cfg.Observer.TextDelta(r.steps, s) })
		timedOut := actx.Err() != nil && ctx.Err() == nil
		cancel()
		if timedOut && err != nil {
			err = fmt.Errorf("the request took longer than %s: %w", r.cfg.Retry.Timeout, errCut)
		}
		if err == nil {
			if !t.counted {
				// No usage from the server: an estimate (4 characters a
				// token) is counted, or --max-tokens would bound nothing.
				out := len(t.text)
				for _, c := range t.calls {
					out += len(c.Name) + len(c.Arguments)
				}
				t.usage = Usage{PromptTokens: int64(info.Chars/4 + 1), CompletionTokens: int64(out/4 + 1)}
				if !r.estimated {
					r.estimated = true
					r.cfg.Observer.Note(r.steps, "the model server sent no token usage; the run counts an estimate (4 characters a token) against its token limit (--max-tokens)")
				}
			}
			r.usage.PromptTokens += t.usage.PromptTokens
			r.usage.CompletionTokens += t.usage.CompletionTokens
			r.cfg.Observer.Usage(r.steps, t.usage)
			r.msgs = append(r.msgs, message{role: "assistant", text: t.text, calls: t.calls, step: r.steps})
			r.cfg.Observer.Assistant(r.steps, t.text, t.calls)
			return t, nil
		}
		if ctx.Err() != nil {
			res := r.ended(parent)
			return t, &res
		}
		status, retryAfter, ctxLen := apiError(err)
		if ctxLen {
			shrinks++
			before := r.chars()
			r.fit(before * 6 / 10)
			if shrinks > maxShrinks || r.chars() >= before {
				return t, &Result{Reason: ContextFull, Message: "the conversation does not fit the model's context window even with every old observation shortened (" + errorText(err, r.cfg.APIKey) + "); use a model with a larger window, or a smaller task"}
			}
			r.cfg.Observer.Note(r.steps, fmt.Sprintf("the model's context window is full (%s): old observations shortened from %d to %d characters; sending again", errorText(err, r.cfg.APIKey), before, r.chars()))
			attempt--
			continue
		}
		if !transient(err, status) || attempt >= r.cfg.Retry.Attempts {
			why := errorText(err, r.cfg.APIKey)
			if transient(err, status) {
				why = fmt.Sprintf("%s (after %d attempts)", why, attempt)
			}
			return t, &Result{Reason: ModelError, Message: "the model request failed: " + why + hint(status)}
		}
		wait := r.cfg.Retry.backoff(attempt, retryAfter)
		what := errorText(err, r.cfg.APIKey)
		if errors.Is(err, errCut) || status == 0 {
			what = "the response stream was cut (" + what + ")"
		}
		r.cfg.Observer.Note(r.steps, fmt.Sprintf("%s; retrying in %s (attempt %d of %d)", what, wait.Round(10e6), attempt+1, r.cfg.Retry.Attempts))
		r.cfg.Logger.Info("retrying a model request", "status", status, "wait", wait, "attempt", attempt+1)
		if err := r.cfg.Sleep(ctx, wait); err != nil {
			res := r.ended(parent)
			return t, &res
		}
	}
}

// hint says what to do about a refused request.
func hint(status int) string {
	switch status {
	case 401, 403:
		return "; check the API key (OPENAI_API_KEY or LIMBS_LLM_API_KEY) and that it may use this model"
	case 404:
		return "; check --model and --base-url (the base URL ends in /v1 for most servers)"
	case 400:
		return "; the server refused the request: check that the model supports tool calls"
	case 0:
		return "; check that the model server runs and --base-url points at it"
	}
	return ""
}

// act runs the calls of t and returns the Result when the run ends
// (finish, stuck, a tool that could not be carried out).
func (r *run) act(ctx, parent context.Context, t turn) (done, stop *Result) {
	obs := make([]Observation, len(t.calls))
	ready := make([]bool, len(t.calls))
	var finishMsg string
	finishAt := -1
	// What the loop answers itself: an answer cut at its size bound,
	// calls beyond MaxCalls, unknown tools, bad JSON, refusals.
	for i, c := range t.calls {
		r.cfg.Observer.ToolCall(r.steps, c)
		switch {
		case t.oversize:
			obs[i], ready[i] = Observation{Text: fmt.Sprintf("This call was not run: your answer passed %d bytes and was cut there, so its calls are not whole. Send shorter answers; write a big file in several calls.", MaxAnswer), IsError: true}, true
		case i >= MaxCalls:
			obs[i], ready[i] = Observation{Text: fmt.Sprintf("This call was not run: an answer may make at most %d tool calls, and yours made %d (the first %d ran). Make the calls that matter, at most %d a turn.", MaxCalls, len(t.calls), MaxCalls, MaxCalls), IsError: true}, true
		default:
			if o, ok := r.check(c); !ok {
				obs[i], ready[i] = o, true
			}
		}
	}
	if r.cfg.Approve != nil {
		for i, c := range t.calls {
			if ready[i] || c.Name == tool.FinishName || r.specs[c.Name].Annotations.ReadOnly {
				continue
			}
			ok, why, err := r.cfg.Approve.Approve(ctx, c)
			if err != nil {
				if ctx.Err() != nil {
					res := r.ended(parent)
					return nil, &res
				}
				ok, why = false, err.Error()
			}
			if !ok {
				text := "The person running the agent did not allow this call; it was not run."
				if why != "" {
					text += " They said: " + why
				}
				obs[i], ready[i] = Observation{Text: text, IsError: true, Refused: true}, true
			}
		}
	}
	// The rest run: in parallel across sessions, in order within one.
	groups := map[string][]int{}
	var keys []string
	for i, c := range t.calls {
		if ready[i] {
			continue
		}
		if c.Name == tool.FinishName {
			finishAt = i
			continue
		}
		k := sessionOf(c.Arguments)
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], i)
	}
	sort.Strings(keys)
	cctx := context.WithValue(ctx, callKey{}, ctx)
	var mu sync.Mutex // guards obs, failed and the Observer while the groups run
	var failed error
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, i := range groups[k] {
				c := t.calls[i]
				res, err := r.specs[c.Name].Call(cctx, json.RawMessage(c.Arguments))
				mu.Lock()
				if err != nil {
					if failed == nil && ctx.Err() == nil {
						failed = err
					}
					obs[i] = Observation{Text: redact(fmt.Sprintf("%s could not be carried out: %v. Try the call again; if it fails the same way, the sandbox is down.", c.Name, err), r.cfg.APIKey), IsError: true}
				} else {
					obs[i] = Observation{Text: res.Text, IsError: res.IsError, Structured: res.Structured}
				}
				r.cfg.Observer.Observation(r.steps, c, obs[i])
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for i, c := range t.calls {
		if ready[i] {
			r.cfg.Observer.Observation(r.steps, c, obs[i])
		}
	}
	if finishAt >= 0 {
		c := t.calls[finishAt]
		res, err := r.specs[c.Name].Call(ctx, json.RawMessage(c.Arguments))
		if err == nil {
			obs[finishAt] = Observation{Text: res.Text, IsError: res.IsError, Structured: res.Structured}
			if out, ok := res.Structured.(tool.FinishOutput); ok && !res.IsError {
				finishMsg = out.Message
			}
		} else {
			obs[finishAt] = Observation{Text: err.Error(), IsError: true}
		}
		r.cfg.Observer.Observation(r.steps, c, obs[finishAt])
	}
	for i, c := range t.calls {
		r.msgs = append(r.msgs, message{role: "tool", text: obs[i].Text, full: obs[i].Text, callID: c.ID, ref: refOf(obs[i]), step: r.steps})
	}
	if ctx.Err() != nil {
		res := r.ended(parent)
		return nil, &res
	}
	if finishAt >= 0 && !obs[finishAt].IsError {
		return &Result{Reason: Finished, Message: finishMsg}, nil
	}
	if failed != nil && r.unreachable() {
		return nil, &Result{Reason: ToolFailure, Message: "the sandbox could not be reached three steps in a row: " + redact(failed.Error(), r.cfg.APIKey)}
	}
	if failed == nil {
		r.toolFails = 0
	}
	switch r.stuck.add(t.calls, obs) {
	case stuckNote:
		r.note(r.stuck.why + ". Try something different; if the task cannot be done, call finish and say why.")
	case stuckStop:
		return nil, &Result{Reason: Stuck, Message: "the model is stuck: " + r.stuck.why + ", again after being told"}
	}
	return nil, nil
}

// unreachable counts a step whose calls could not be carried out; three
// in a row end the run.
func (r *run) unreachable() bool {
	r.toolFails++
	return r.toolFails >= 3
}

// check answers the calls the loop refuses itself: an unknown tool, and
// arguments that are not one JSON object.
func (r *run) check(c ToolCall) (Observation, bool) {
	if _, ok := r.specs[c.Name]; !ok {
		names := make([]string, 0, len(r.specs))
		for n := range r.specs {
			names = append(names, n)
		}
		sort.Strings(names)
		return Observation{Text: fmt.Sprintf("There is no tool %q. The tools are: %s. Call one of them.", c.Name, strings.Join(names, ", ")), IsError: true}, false
	}
	s := strings.TrimSpace(c.Arguments)
	if s == "" {
		return Observation{}, true
	}
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return Observation{Text: fmt.Sprintf("The arguments of %s are not valid JSON (%v): %s. Send the call again with the arguments as one JSON object, e.g. {\"command\": \"ls\"}.", c.Name, err, clip(s, 200)), IsError: true}, false
	}
	if _, ok := v.(map[string]any); !ok {
		return Observation{Text: fmt.Sprintf("The arguments of %s must be one JSON object, not %s. Send the call again with an object of the fields its schema lists.", c.Name, clip(s, 200)), IsError: true}, false
	}
	return Observation{}, true
}
