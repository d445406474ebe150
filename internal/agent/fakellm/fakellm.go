// Package fakellm is a fake model server that speaks the OpenAI chat
// completions wire protocol over real HTTP on 127.0.0.1, following a
// scripted trajectory, so that the agent loop (and `limbs agent`) can be
// tested, and shown, end to end without a model.
//
// It answers POST /v1/chat/completions (and /chat/completions) the way
// OpenAI does with "stream": true: Server-Sent Events, one
// chat.completion.chunk per "data:" line, the role first, the text in
// pieces, each tool call opened by a chunk with its index, id and name and
// then its arguments in several pieces, a last chunk with finish_reason,
// a usage chunk with empty choices when stream_options.include_usage is
// set, and "data: [DONE]". Without "stream" it answers one
// chat.completion object.
//
// The script is a list of turns, each a text and/or tool calls, served one
// per request in order. A turn with When is served only if the last
// observation (the trailing tool messages of the request) matches it; a
// turn whose When does not match is skipped. Faults come before their
// turn, one request each: HTTP 500, HTTP 429 with Retry-After, a stream
// cut in the middle (the connection closed after part of the answer), and
// a context-length error with OpenAI's own error body
// (code context_length_exceeded), a stream that never ends, and one with
// no choice at all. A turn may send usage of its own (wrong on purpose)
// or none. MaxContextChars makes the server refuse
// every request whose messages are too long the same way, as a real
// server with a small window does. Malformed arguments and unknown tools
// are just what a turn's calls say (RawArguments is sent as it is).
//
// It must never listen on anything but 127.0.0.1, and it is a test and
// demonstration tool: it checks no key (it records whether one was sent).
package fakellm

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Call is one tool call of a turn.
type Call struct {
	// ID is the call's id; empty: call_<turn>_<index>.
	ID   string `json:"id,omitempty"`
	Name string `json:"name"`
	// Arguments is the JSON object of the arguments.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// RawArguments, when set, is sent instead of Arguments, as it is
	// (malformed JSON, a wrong type).
	RawArguments string `json:"raw_arguments,omitempty"`
}

// Fault kinds.
const (
	Fault500           = "500"            // HTTP 500 with an OpenAI error body
	Fault429           = "429"            // HTTP 429 with Retry-After: RetryAfter seconds
	FaultCut           = "cut"            // stream part of the answer, then close the connection
	FaultContextLength = "context_length" // HTTP 400, code context_length_exceeded
	// FaultEndless streams text without end (64 KiB a chunk) until the
	// client goes away or Fault.Bytes were sent: a server that never
	// finishes.
	FaultEndless = "endless"
	// FaultNoChoices streams a response without any choice: a usage
	// chunk and [DONE].
	FaultNoChoices = "no_choices"
)

// Fault is one failed answer, served instead of a turn (the turn follows
// on the next request).
type Fault struct {
	Kind string `json:"kind"`
	// RetryAfter is the Retry-After header of a 429, in seconds.
	RetryAfter int `json:"retry_after,omitempty"`
	// Bytes bounds an endless stream; 0: 1 GiB.
	Bytes int `json:"bytes,omitempty"`
}

// Turn is one scripted answer of the model.
type Turn struct {
	// When is a regular expression the last observation must match for
	// this turn to be served; a turn that does not match is skipped.
	When  string `json:"when,omitempty"`
	Text  string `json:"text,omitempty"`
	Calls []Call `json:"calls,omitempty"`
	// Faults are served, one request each, before the turn.
	Faults []Fault `json:"faults,omitempty"`
	// Repeat serves the turn this many times in all (0 or 1: once).
	Repeat int `json:"repeat,omitempty"`
	// Usage, when set, is sent as the usage object as it is (a server
	// that counts wrong: negative, huge); NoUsage sends none, even when
	// the request asked for it.
	Usage   json.RawMessage `json:"usage,omitempty"`
	NoUsage bool            `json:"no_usage,omitempty"`
}

// Script is a trajectory: the turns, and how the server behaves.
type Script struct {
	Turns []Turn `json:"turns"`
	// MaxContextChars, when positive, refuses every request whose
	// messages hold more characters than this with the context-length
	// error.
	MaxContextChars int `json:"max_context_chars,omitempty"`
}

// Load reads a Script from a JSON file.
func Load(path string) (Script, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Script{}, err
	}
	var s Script
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Script{}, fmt.Errorf("%s: %w", path, err)
	}
	for i, t := range s.Turns {
		if t.When != "" {
			if _, err := regexp.Compile(t.When); err != nil {
				return Script{}, fmt.Errorf("%s: turn %d: when: %w", path, i+1, err)
			}
		}
	}
	return s, nil
}

// Message is one message of a request, as the server saw it.
type Message struct {
	Role       string `json:"role"`
	Content    string `json:"content"`
	ToolCallID string `json:"tool_call_id,omitempty"`
	ToolCalls  []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls,omitempty"`
}

// Request is what the server received, and what it answered.
type Request struct {
	Model        string
	Messages     []Message
	Tools        []string // the names of the tools offered
	Stream       bool
	IncludeUsage bool
	// Authorized: an Authorization header was sent.
	Authorized bool
	// Answer says what was served: "turn N" (1-based), a fault kind, or
	// "end" once the script is over.
	Answer string
}

// Server is a running fake model server.
type Server struct {
	URL string // the base URL clients take: http://127.0.0.1:PORT/v1

	srv *http.Server
	ln  net.Listener

	mu      sync.Mutex // guards the fields below
	script  Script
	pos     int // the next turn
	faults  int // faults of turn pos already served
	served  int // times turn pos was served
	reqs    []Request
	chunked int // the id counter of completions
}

// Start serves script on a fresh 127.0.0.1 port until Close.
func Start(script Script) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{script: script, ln: ln, URL: "http://" + ln.Addr().String() + "/v1"}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.complete)
	mux.HandleFunc("POST /chat/completions", s.complete)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server.
func (s *Server) Close() error { return s.srv.Close() }

// Requests returns what the server received so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Answers returns the Answer of each request so far, in order.
func (s *Server) Answers() []string {
	var a []string
	for _, r := range s.Requests() {
		a = append(a, r.Answer)
	}
	return a
}

// request is the part of a chat completions request the server reads.
type request struct {
	Model         string    `json:"model"`
	Messages      []Message `json:"messages"`
	Stream        bool      `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Tools []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

// lastObservation is the content of the trailing tool messages.
func lastObservation(ms []Message) string {
	var parts []string
	for i := len(ms) - 1; i >= 0 && ms[i].Role == "tool"; i-- {
		parts = append([]string{ms[i].Content}, parts...)
	}
	return strings.Join(parts, "\n")
}

// next picks what to answer req with: a fault, a turn (and its number),
// or neither when the script is over.
func (s *Server) next(obs string, chars int) (f *Fault, t *Turn, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.script.MaxContextChars > 0 && chars > s.script.MaxContextChars {
		return &Fault{Kind: FaultContextLength}, nil, 0
	}
	for s.pos < len(s.script.Turns) {
		cur := &s.script.Turns[s.pos]
		if s.faults < len(cur.Faults) {
			s.faults++
			return &cur.Faults[s.faults-1], nil, 0
		}
		if s.served == 0 && cur.When != "" && !regexp.MustCompile(cur.When).MatchString(obs) {
			s.pos, s.faults = s.pos+1, 0
			continue
		}
		s.served++
		n = s.pos + 1
		if s.served >= max(cur.Repeat, 1) {
			s.pos, s.faults, s.served = s.pos+1, 0, 0
		}
		return nil, cur, n
	}
	return nil, nil, 0
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request) {
	var req request
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<20)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "could not parse the JSON body: "+err.Error())
		return
	}
	chars := 0
	for _, m := range req.Messages {
		chars += len(m.Content)
		for _, c := range m.ToolCalls {
			chars += len(c.Function.Arguments)
		}
	}
	f, t, n := s.next(lastObservation(req.Messages), chars)
	rec := Request{Model: req.Model, Messages: req.Messages, Stream: req.Stream,
		IncludeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		Authorized:   r.Header.Get("Authorization") != ""}
	for _, tl := range req.Tools {
		rec.Tools = append(rec.Tools, tl.Function.Name)
	}
	switch {
	case f != nil:
		rec.Answer = f.Kind
	case t != nil:
		rec.Answer = "turn " + strconv.Itoa(n)
	default:
		rec.Answer = "end"
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, rec)
	s.chunked++
	id := fmt.Sprintf("chatcmpl-fake%d", s.chunked)
	s.mu.Unlock()

	if f != nil {
		s.fault(w, r, *f, id, req)
		return
	}
	if t == nil {
		t = &Turn{Text: "(fakellm: the script has ended; there is nothing more to say.)"}
	}
	a := answer{id: id, model: req.Model, turn: n, t: *t, promptChars: chars}
	if !req.Stream {
		a.whole(w)
		return
	}
	a.stream(w, req.StreamOptions != nil && req.StreamOptions.IncludeUsage, -1)
}

func (s *Server) fault(w http.ResponseWriter, r *http.Request, f Fault, id string, req request) {
	switch f.Kind {
	case FaultEndless:
		a := answer{id: id, model: req.Model}
		a.endless(w, r, f.Bytes)
	case FaultNoChoices:
		w.Header().Set("Content-Type", "text/event-stream")
		b, _ := json.Marshal(map[string]any{"id": id, "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": req.Model,
			"choices": []any{}, "usage": map[string]any{"prompt_tokens": 10, "completion_tokens": 0, "total_tokens": 10}})
		fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", b)
	case Fault429:
		w.Header().Set("Retry-After", strconv.Itoa(f.RetryAfter))
		writeError(w, http.StatusTooManyRequests, "requests", "rate_limit_exceeded", "Rate limit reached for requests. Please try again later.")
	case FaultContextLength:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "context_length_exceeded",
			"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages.")
	case FaultCut:
		a := answer{id: id, model: req.Model, t: Turn{Text: "Let me look at the failing test and then I will"}}
		a.stream(w, false, 3)
	default:
		writeError(w, http.StatusInternalServerError, "server_error", "", "The server had an error while processing your request. Sorry about that!")
	}
}

// writeError writes OpenAI's error body.
func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	var c any
	if code != "" {
		c = code
	}
	p := "messages"
	if status != http.StatusBadRequest {
		p = ""
	}
	var param any
	if p != "" {
		param = p
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": param, "code": c}})
}

// answer is one turn being served.
type answer struct {
	id, model   string
	turn        int
	t           Turn
	promptChars int
}

func (a answer) callID(i int, c Call) string {
	if c.ID != "" {
		return c.ID
	}
	return fmt.Sprintf("call_%d_%d", a.turn, i)
}

func (a answer) args(c Call) string {
	if c.RawArguments != "" {
		return c.RawArguments
	}
	if len(c.Arguments) == 0 {
		return "{}"
	}
	return string(c.Arguments)
}

func (a answer) usage() any {
	if a.t.Usage != nil {
		return a.t.Usage
	}
	out := len(a.t.Text)
	for _, c := range a.t.Calls {
		out += len(c.Name) + len(a.args(c))
	}
	p, cpl := a.promptChars/4+1, out/4+1
	return map[string]any{"prompt_tokens": p, "completion_tokens": cpl, "total_tokens": p + cpl}
}

func (a answer) finishReason() string {
	if len(a.t.Calls) > 0 {
		return "tool_calls"
	}
	return "stop"
}

// whole answers a request without "stream".
func (a answer) whole(w http.ResponseWriter) {
	msg := map[string]any{"role": "assistant", "content": a.t.Text}
	if a.t.Text == "" {
		msg["content"] = nil
	}
	var calls []any
	for i, c := range a.t.Calls {
		calls = append(calls, map[string]any{"id": a.callID(i, c), "type": "function", "function": map[string]any{"name": c.Name, "arguments": a.args(c)}})
	}
	if calls != nil {
		msg["tool_calls"] = calls
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": a.id, "object": "chat.completion", "created": time.Now().Unix(), "model": a.model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": a.finishReason()}},
		"usage":   a.usage(),
	})
}

// pieces splits s into about n parts (never inside a UTF-8 sequence).
func pieces(s string, n int) []string {
	if s == "" {
		return nil
	}
	r := []rune(s)
	size := (len(r) + n - 1) / n
	var out []string
	for len(r) > 0 {
		k := min(size, len(r))
		out = append(out, string(r[:k]))
		r = r[k:]
	}
	return out
}

// stream answers with SSE chunks. cut >= 0 closes the connection after
// that many chunks, as a proxy or a crashed server does.
func (a answer) stream(w http.ResponseWriter, usage bool, cut int) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	sent := 0
	send := func(v any) bool {
		if cut >= 0 && sent >= cut {
			return false
		}
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if fl != nil {
			fl.Flush()
		}
		sent++
		return true
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": a.id, "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": a.model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	ok := send(chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	for _, p := range pieces(a.t.Text, 4) {
		ok = ok && send(chunk(map[string]any{"content": p}, nil))
	}
	for i, c := range a.t.Calls {
		ok = ok && send(chunk(map[string]any{"tool_calls": []any{map[string]any{
			"index": i, "id": a.callID(i, c), "type": "function", "function": map[string]any{"name": c.Name, "arguments": ""}}}}, nil))
		for _, p := range pieces(a.args(c), 3) {
			ok = ok && send(chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": p}}}}, nil))
		}
	}
	if !ok {
		abort(w)
		return
	}
	send(chunk(map[string]any{}, a.finishReason()))
	if usage && !a.t.NoUsage {
		send(map[string]any{"id": a.id, "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": a.model,
			"choices": []any{}, "usage": a.usage()})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if fl != nil {
		fl.Flush()
	}
}

// endless streams text until the client goes, or limit bytes (0: 1 GiB)
// were sent.
func (a answer) endless(w http.ResponseWriter, r *http.Request, limit int) {
	if limit <= 0 {
		limit = 1 << 30
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	b, _ := json.Marshal(map[string]any{"id": a.id, "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": a.model,
		"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": strings.Repeat("more ", 64<<10/5)}, "finish_reason": nil}}})
	for range limit/len(b) + 1 {
		if r.Context().Err() != nil {
			return
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return
		}
		if fl != nil {
			fl.Flush()
		}
	}
}

// abort closes the connection under a streaming response, so that the
// client sees the body end without its last chunk.
func abort(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	conn, _, err := rc.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}
