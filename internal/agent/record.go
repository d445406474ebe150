package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Sink takes a batch of the agent's events, in order: limbs serve's
// POST /v1/sandboxes/{id}/events, or a file.
type Sink func(ctx context.Context, evs []wire.Event) error

// RecordOptions configure NewRecorder.
type RecordOptions struct {
	// Run names the run in every event's data.
	Run   string
	Model string
	// System and Task are recorded first, as the messages of step 0.
	System, Task string
	// APIKey is removed from every event (the Observer never gets it;
	// this guards against a model or a tool that echoes it).
	APIKey string
	Sink   Sink
	Logger *slog.Logger
	// Buffer is how many events wait for the Sink before new ones are
	// dropped (counted, and logged at Close); 0: 4096.
	Buffer int
	// Every is how often a partial batch is sent; 0: 500 ms.
	Every time.Duration
	// Timeout bounds one call of the Sink; 0: 10 s.
	Timeout time.Duration
}

// maxBatch is the most events one call of the Sink gets (limbs serve
// takes at most 1000 a request); maxBatchBytes the most bytes of their
// data (limbs serve takes at most 8 MiB a request).
const (
	maxBatch      = 200
	maxBatchBytes = 4 << 20
)

// MaxEventData is the most bytes of one event's data: the texts of a
// bigger one (an answer, arguments, an observation) are clipped, saying
// how much was left out, so that the event fits a request of limbs
// serve and the log is not filled by one run.
const MaxEventData = 1 << 20

// Recorder is an Observer that turns a run into agent.* events (the
// types of internal/wire, source agent) and hands them to a Sink in
// batches from a goroutine of its own: the loop never waits for the
// Sink, and a Sink that fails or is slow loses events (logged), never
// the run. Close sends what is left.
type Recorder struct {
	Nop
	o  RecordOptions
	ch chan wire.Event

	mu      sync.Mutex // guards the fields below
	dropped int
	failed  int // events the Sink refused
	closed  bool

	done chan struct{}
}

// NewRecorder starts a Recorder; call Close when the run has ended.
func NewRecorder(o RecordOptions) *Recorder {
	if o.Buffer <= 0 {
		o.Buffer = 4096
	}
	if o.Every <= 0 {
		o.Every = 500 * time.Millisecond
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Recorder{o: o, ch: make(chan wire.Event, o.Buffer), done: make(chan struct{})}
	go r.send()
	if o.System != "" {
		r.emit(wire.EventAgentMessage, "", "", wire.AgentMessageData{Role: "system", Text: o.System})
	}
	r.emit(wire.EventAgentMessage, "", "", wire.AgentMessageData{Role: "user", Text: o.Task})
	return r
}

// emit queues one event; data's Run is set here.
func (r *Recorder) emit(typ wire.EventType, session, command string, data any) {
	switch d := data.(type) {
	case wire.AgentRequestData:
		d.Run = r.o.Run
		data = d
	case wire.AgentMessageData:
		d.Run = r.o.Run
		data = d
	case wire.AgentCallData:
		d.Run = r.o.Run
		data = d
	case wire.AgentObservationData:
		d.Run = r.o.Run
		data = d
	case wire.AgentUsageData:
		d.Run = r.o.Run
		data = d
	case wire.AgentFinishedData:
		d.Run = r.o.Run
		data = d
	}
	b, err := json.Marshal(data)
	// Clip the texts until it fits; escaping may make a byte six, so a
	// few rounds of halving may be needed (bounded).
	for limit := MaxEventData / 2; err == nil && len(b) > MaxEventData && limit > 0; limit /= 2 {
		b, err = json.Marshal(clipData(data, limit))
	}
	if err != nil {
		r.o.Logger.Warn("recording an agent event", "type", typ, "err", err)
		return
	}
	ev := wire.Event{Time: time.Now().UTC(), Type: typ, Source: wire.SourceAgent, Session: session, Command: command, Data: r.redact(b)}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	select {
	case r.ch <- ev:
	default:
		r.dropped++
	}
}

// redact removes the API key from b, a JSON text: the key as it is and
// as JSON escapes it.
func (r *Recorder) redact(b []byte) json.RawMessage {
	k := r.o.APIKey
	if len(k) < 4 {
		return b
	}
	s := string(b)
	q, _ := json.Marshal(k)
	for _, form := range []string{k, string(q[1 : len(q)-1])} {
		s = strings.ReplaceAll(s, form, "[the API key]")
	}
	return json.RawMessage(s)
}

// clipData is data with each of its texts at most limit bytes, the
// total of a message's calls' arguments too.
func clipData(data any, limit int) any {
	c := func(s string, n int) string {
		if len(s) <= n {
			return s
		}
		return clip(s, n) + fmt.Sprintf(" [... %d bytes not recorded: an event keeps at most %d]", len(s)-n, MaxEventData)
	}
	switch d := data.(type) {
	case wire.AgentMessageData:
		d.Text = c(d.Text, limit)
		d.Calls = append([]wire.AgentCallData(nil), d.Calls...)
		for i := range d.Calls {
			d.Calls[i].Arguments = c(d.Calls[i].Arguments, limit/max(len(d.Calls), 1))
		}
		return d
	case wire.AgentCallData:
		d.Arguments = c(d.Arguments, limit)
		return d
	case wire.AgentObservationData:
		d.Text = c(d.Text, limit)
		return d
	case wire.AgentFinishedData:
		d.Message = c(d.Message, limit)
		return d
	}
	return data
}

func (r *Recorder) send() {
	defer close(r.done)
	t := time.NewTicker(r.o.Every)
	defer t.Stop()
	var batch []wire.Event
	size := 0
	flush := func() {
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.o.Timeout)
		err := r.o.Sink(ctx, batch)
		cancel()
		if err != nil {
			r.mu.Lock()
			first := r.failed == 0
			r.failed += len(batch)
			r.mu.Unlock()
			if first {
				r.o.Logger.Warn("recording the agent's events failed; the run goes on without them", "events", len(batch), "err", err)
			}
		}
		batch, size = nil, 0
	}
	for {
		select {
		case ev, ok := <-r.ch:
			if !ok {
				flush()
				return
			}
			if size+len(ev.Data) > maxBatchBytes {
				flush()
			}
			batch = append(batch, ev)
			size += len(ev.Data)
			if len(batch) >= maxBatch {
				flush()
			}
		case <-t.C:
			flush()
		}
	}
}

// Close sends the events still queued and waits for it until ctx ends.
// It returns how many events were lost: dropped because the queue was
// full, refused by the Sink, or left when ctx ended.
func (r *Recorder) Close(ctx context.Context) int {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.ch)
	}
	r.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.dropped + r.failed + len(r.ch)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	lost := r.dropped + r.failed
	if lost > 0 {
		r.o.Logger.Warn("some of the agent's events were not recorded", "lost", lost, "dropped_queue_full", r.dropped)
	}
	return lost
}

func (r *Recorder) Request(i RequestInfo) {
	r.emit(wire.EventAgentRequest, "", "", wire.AgentRequestData{Step: i.Step, Attempt: i.Attempt, Model: i.Model, Host: i.Host, Messages: i.Messages, Chars: i.Chars, Tools: i.Tools})
}

func (r *Recorder) Assistant(step int, text string, calls []ToolCall) {
	d := wire.AgentMessageData{Step: step, Role: "assistant", Model: r.o.Model, Text: text}
	for _, c := range calls {
		d.Calls = append(d.Calls, wire.AgentCallData{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
	}
	r.emit(wire.EventAgentMessage, "", "", d)
}

func (r *Recorder) Usage(step int, u Usage) {
	r.emit(wire.EventAgentUsage, "", "", wire.AgentUsageData{Step: step, PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens})
}

func (r *Recorder) ToolCall(step int, c ToolCall) {
	r.emit(wire.EventAgentToolCall, "", "", wire.AgentCallData{Step: step, ID: c.ID, Name: c.Name, Arguments: c.Arguments})
}

func (r *Recorder) Observation(step int, c ToolCall, o Observation) {
	d := wire.AgentObservationData{Step: step, CallID: c.ID, Name: c.Name, Text: o.Text, IsError: o.IsError, Refused: o.Refused}
	if o.Structured != nil {
		// The facts of a command's result (tool.ShellOutput and the
		// profiles' shapes of it), by their JSON names.
		var f struct {
			Session     string     `json:"session"`
			Command     string     `json:"command"`
			Status      string     `json:"status"`
			ExitCode    *int       `json:"exit_code"`
			Shown       [][2]int64 `json:"shown"`
			OutputBytes int64      `json:"output_bytes"`
		}
		if b, err := json.Marshal(o.Structured); err == nil && json.Unmarshal(b, &f) == nil && strings.HasPrefix(f.Command, "c_") {
			d.Session, d.Command, d.Status, d.ExitCode, d.Shown, d.OutputBytes = f.Session, f.Command, f.Status, f.ExitCode, f.Shown, f.OutputBytes
		}
	}
	r.emit(wire.EventAgentObservation, d.Session, d.Command, d)
}

func (r *Recorder) Note(step int, text string) {
	r.emit(wire.EventAgentMessage, "", "", wire.AgentMessageData{Step: step, Role: "note", Text: text})
}

func (r *Recorder) Stop(res Result) {
	r.emit(wire.EventAgentFinished, "", "", wire.AgentFinishedData{
		Reason: string(res.Reason), Message: res.Message, Steps: res.Steps,
		PromptTokens: res.Usage.PromptTokens, CompletionTokens: res.Usage.CompletionTokens,
		Cost: res.Cost, DurationMs: res.Duration.Milliseconds(),
	})
}
