package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// message is one message of the conversation as the loop keeps it: the
// observations keep their full text (for the Observer) and what the model
// is shown now (shortened when old, see window.go).
type message struct {
	role   string // system, user, assistant, tool
	text   string // what is sent
	calls  []ToolCall
	callID string // of a tool message
	// full is a tool message's text before any shortening; ref names the
	// command it showed ("c_3 in session s") when known; step is the
	// step it belongs to.
	full  string
	ref   *commandRef
	short bool
	step  int
}

// model is the chat completions client of a run.
type model struct {
	cl    openai.Client
	tools []openai.ChatCompletionToolUnionParam
	host  string // the server's host, for the Observer
}

func newModel(cfg Config) *model {
	base := cfg.BaseURL
	if base == "" {
		base = "https://api.openai.com/v1"
	}
	opts := []option.RequestOption{
		option.WithBaseURL(strings.TrimRight(base, "/") + "/"),
		option.WithMaxRetries(0), // the loop retries itself: it must see every attempt
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	} else {
		opts = append(opts, option.WithAPIKey(""))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	m := &model{cl: openai.NewClient(opts...)}
	if u, err := url.Parse(base); err == nil {
		m.host = u.Host
	}
	for _, s := range cfg.Tools {
		var params map[string]any
		if err := json.Unmarshal(s.InputSchema, &params); err != nil || params == nil {
			params = map[string]any{"type": "object"}
		}
		m.tools = append(m.tools, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name:        s.Name,
			Description: openai.String(s.Description),
			Parameters:  shared.FunctionParameters(params),
		}))
	}
	return m
}

// params are the request of the conversation msgs.
func (m *model) params(name string, msgs []message) openai.ChatCompletionNewParams {
	p := openai.ChatCompletionNewParams{
		Model:         shared.ChatModel(name),
		Tools:         m.tools,
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	for _, msg := range msgs {
		switch msg.role {
		case "system":
			p.Messages = append(p.Messages, openai.SystemMessage(msg.text))
		case "user":
			p.Messages = append(p.Messages, openai.UserMessage(msg.text))
		case "tool":
			p.Messages = append(p.Messages, openai.ToolMessage(msg.text, msg.callID))
		case "assistant":
			a := openai.ChatCompletionAssistantMessageParam{}
			if msg.text != "" || len(msg.calls) == 0 {
				a.Content.OfString = openai.String(msg.text)
			}
			for _, c := range msg.calls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID:       c.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.Name, Arguments: c.Arguments},
					}})
			}
			p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		}
	}
	return p
}

// turn is one assistant answer.
type turn struct {
	text   string
	calls  []ToolCall
	finish string // finish_reason
	usage  Usage
	// counted: the server sent the usage (else it is estimated).
	counted bool
	// oversize: the answer passed MaxAnswer and was cut there; its calls
	// do not run.
	oversize bool
}

// errCut is a stream that ended before its finish_reason.
var errCut = errors.New("the stream ended before the answer was complete")

// errNoChoices is a response that held no choice at all.
var errNoChoices = fmt.Errorf("the server's response held no choices (no message, no tool call): %w", errCut)

// maxTokens bounds the tokens one request may count (a server's usage
// beyond it is taken as it, so that sums cannot overflow).
const maxTokens = 1 << 40

// countedUsage is the usage a server sent, made sane: negative counts
// are 0, absurd ones maxTokens; ok is false when nothing was counted.
func countedUsage(prompt, completion int64) (Usage, bool) {
	clamp := func(n int64) int64 { return min(max(n, 0), maxTokens) }
	u := Usage{PromptTokens: clamp(prompt), CompletionTokens: clamp(completion)}
	return u, u.Total() > 0
}

// stream makes one streaming request and gathers the answer, handing the
// text to onText as it comes.
func (m *model) stream(ctx context.Context, p openai.ChatCompletionNewParams, onText func(string)) (turn, error) {
	s := m.cl.Chat.Completions.NewStreaming(ctx, p)
	defer s.Close()
	var t turn
	var text strings.Builder
	type partial struct {
		id, name string
		args     strings.Builder
	}
	var calls []*partial
	byIndex := map[int64]*partial{}
	size, choices := 0, false
	for s.Next() {
		ch := s.Current()
		if ch.JSON.Usage.Valid() {
			if u, ok := countedUsage(ch.Usage.PromptTokens, ch.Usage.CompletionTokens); ok {
				t.usage, t.counted = u, true
			}
		}
		for _, c := range ch.Choices {
			if c.Index != 0 {
				continue
			}
			choices = true
			size += len(c.Delta.Content)
			for _, tc := range c.Delta.ToolCalls {
				size += len(tc.ID) + len(tc.Function.Name) + len(tc.Function.Arguments)
			}
			if size > MaxAnswer {
				// Not taken: the answer is cut here, and none of its
				// calls runs (the last one is not whole).
				t.oversize, t.finish = true, "length"
				break
			}
			if d := c.Delta.Content; d != "" {
				text.WriteString(d)
				onText(d)
			}
			for _, tc := range c.Delta.ToolCalls {
				pc := byIndex[tc.Index]
				if pc == nil {
					pc = &partial{}
					byIndex[tc.Index] = pc
					calls = append(calls, pc)
				}
				if tc.ID != "" {
					pc.id = tc.ID
				}
				if tc.Function.Name != "" {
					pc.name += tc.Function.Name
				}
				pc.args.WriteString(tc.Function.Arguments)
			}
			if c.FinishReason != "" {
				t.finish = c.FinishReason
			}
		}
		if t.oversize {
			break
		}
	}
	if err := s.Err(); err != nil && !t.oversize {
		return t, err
	}
	if t.finish == "" {
		if !choices {
			return t, errNoChoices
		}
		return t, errCut
	}
	t.text = text.String()
	ids := map[string]bool{}
	for i, pc := range calls {
		id := pc.id
		if id == "" || ids[id] {
			// Each result must answer exactly one call: a call without
			// an id, or with one an earlier call has, gets its own.
			id = fmt.Sprintf("call_%d", i)
			for ids[id] {
				id += "_"
			}
		}
		ids[id] = true
		t.calls = append(t.calls, ToolCall{ID: id, Name: pc.name, Arguments: pc.args.String()})
	}
	return t, nil
}

// apiError classifies err: its HTTP status (0 when none came), the wait
// the server asked for, and whether it is a context-length error.
func apiError(err error) (status int, retryAfter time.Duration, contextLength bool) {
	var ae *openai.Error
	if !errors.As(err, &ae) {
		return 0, 0, false
	}
	status = ae.StatusCode
	msg := strings.ToLower(ae.Message)
	contextLength = ae.Code == "context_length_exceeded" ||
		strings.Contains(msg, "context length") || strings.Contains(msg, "context window") || strings.Contains(msg, "maximum context")
	if ae.Response != nil {
		h := ae.Response.Header
		if ms, err := strconv.ParseFloat(h.Get("Retry-After-Ms"), 64); err == nil && ms >= 0 {
			retryAfter = time.Duration(ms * float64(time.Millisecond))
		} else if v := h.Get("Retry-After"); v != "" {
			if sec, err := strconv.ParseFloat(v, 64); err == nil && sec >= 0 {
				retryAfter = time.Duration(sec * float64(time.Second))
			} else if at, err := http.ParseTime(v); err == nil {
				retryAfter = max(time.Until(at), 0)
			}
		}
	}
	return status, retryAfter, contextLength
}

// transient: a failure worth another attempt (the server's 408, 409,
// 429 or 5xx, a connection that failed or was cut).
func transient(err error, status int) bool {
	switch {
	case status == http.StatusRequestTimeout, status == http.StatusConflict, status == http.StatusTooManyRequests, status >= 500:
		return true
	case status != 0:
		return false
	}
	var ne net.Error
	return errors.Is(err, errCut) || errors.As(err, &ne) || errors.Is(err, net.ErrClosed) ||
		strings.Contains(err.Error(), "unexpected EOF") || strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "EOF")
}

// backoff is the wait before attempt n (1: the first retry): Base
// doubled each time, with up to 25% jitter either way, capped at MaxWait;
// a Retry-After the server sent is honoured (never waited less), capped
// the same way.
func (r Retry) backoff(n int, retryAfter time.Duration) time.Duration {
	d := r.Base << (n - 1)
	if d <= 0 || d > r.MaxWait {
		d = r.MaxWait
	}
	d = time.Duration(float64(d) * (0.75 + rand.Float64()*0.5))
	if retryAfter > 0 {
		d = retryAfter + time.Duration(rand.Float64()*float64(r.Base)/4)
	}
	return min(d, r.MaxWait)
}

// errorText is what a failed request says to a person: the server's
// message and status, never the key.
func errorText(err error, key string) string {
	var ae *openai.Error
	if errors.As(err, &ae) {
		msg := ae.Message
		if msg == "" {
			msg = http.StatusText(ae.StatusCode)
		}
		return redact(fmt.Sprintf("the model server answered %d: %s", ae.StatusCode, msg), key)
	}
	return redact(err.Error(), key)
}
