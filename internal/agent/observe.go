package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode"
)

// Observer receives a run as it happens: the hook a terminal printer, an
// event log or a trajectory writer plugs into. Its calls never overlap
// within one Run. It never gets the API key.
type Observer interface {
	// Request is called before each model request (each retry too).
	Request(RequestInfo)
	// TextDelta is a piece of the model's text as it streams (a request
	// that is retried may have streamed some already).
	TextDelta(step int, text string)
	// Assistant is the model's whole answer of a step.
	Assistant(step int, text string, calls []ToolCall)
	// Usage is the tokens one request used, as the server counted them.
	Usage(step int, u Usage)
	// ToolCall is called for each call before it runs, in the model's order.
	ToolCall(step int, c ToolCall)
	// Observation is the result of c, as the model gets it.
	Observation(step int, c ToolCall, o Observation)
	// Note is something the loop did or told the model: a retry, a
	// shortened context, a stuck warning, a nudge.
	Note(step int, text string)
	// Stop is how the run ended.
	Stop(Result)
}

// Nop is an Observer that does nothing; embed it to implement a part.
type Nop struct{}

func (Nop) Request(RequestInfo)                    {}
func (Nop) TextDelta(int, string)                  {}
func (Nop) Assistant(int, string, []ToolCall)      {}
func (Nop) Usage(int, Usage)                       {}
func (Nop) ToolCall(int, ToolCall)                 {}
func (Nop) Observation(int, ToolCall, Observation) {}
func (Nop) Note(int, string)                       {}
func (Nop) Stop(Result)                            {}

// Observers is an Observer that hands every call to each of its own.
type Observers []Observer

func (os Observers) Request(i RequestInfo) {
	for _, o := range os {
		o.Request(i)
	}
}
func (os Observers) TextDelta(s int, t string) {
	for _, o := range os {
		o.TextDelta(s, t)
	}
}
func (os Observers) Assistant(s int, t string, c []ToolCall) {
	for _, o := range os {
		o.Assistant(s, t, c)
	}
}
func (os Observers) Usage(s int, u Usage) {
	for _, o := range os {
		o.Usage(s, u)
	}
}
func (os Observers) ToolCall(s int, c ToolCall) {
	for _, o := range os {
		o.ToolCall(s, c)
	}
}
func (os Observers) Observation(s int, c ToolCall, ob Observation) {
	for _, o := range os {
		o.Observation(s, c, ob)
	}
}
func (os Observers) Note(s int, t string) {
	for _, o := range os {
		o.Note(s, t)
	}
}
func (os Observers) Stop(r Result) {
	for _, o := range os {
		o.Stop(r)
	}
}

// Printer writes a run to a terminal as it happens: the step headers,
// the model's text as it streams, each call ("$ tool {args}"), each
// observation (the first MaxObservation bytes of it), the loop's notes
// and the end.
type Printer struct {
	W io.Writer
	// MaxObservation is the most bytes of an observation printed; 0: 4000.
	MaxObservation int

	mu      sync.Mutex // guards the fields below
	step    int
	midLine bool   // the last text printed did not end a line
	last    string // the id of the call printed last
}

func (p *Printer) printf(format string, a ...any) {
	if p.midLine {
		fmt.Fprintln(p.W)
		p.midLine = false
	}
	fmt.Fprint(p.W, printable(fmt.Sprintf(format, a...)))
}

// printable escapes what would act on a terminal instead of showing:
// control characters but newline and tab, DEL, the C1 controls and the
// format characters (bidi overrides, zero-width). The model's text and
// every observation are written by the sandbox or the model server, and
// the host trusts neither.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if r != '\n' && r != '\t' && (r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || unicode.Is(unicode.Cf, r)) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if r != '\n' && r != '\t' && (r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || unicode.Is(unicode.Cf, r)) {
			fmt.Fprintf(&b, "\\u%04x", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (p *Printer) header(step int) {
	if step != p.step {
		p.step = step
		p.printf("\n## step %d\n", step)
	}
}

func (p *Printer) Request(i RequestInfo) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.header(i.Step)
}

func (p *Printer) TextDelta(step int, t string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.header(step)
	fmt.Fprint(p.W, printable(t))
	p.midLine = !strings.HasSuffix(t, "\n")
}

func (p *Printer) Assistant(int, string, []ToolCall) {}
func (p *Printer) Usage(int, Usage)                  {}

func (p *Printer) ToolCall(step int, c ToolCall) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.header(step)
	p.printf("$ %s %s\n", c.Name, oneLine(clip(c.Arguments, 2000)))
	p.last = c.ID
}

func (p *Printer) Observation(step int, c ToolCall, o Observation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	max := p.MaxObservation
	if max <= 0 {
		max = 4000
	}
	text := o.Text
	if len(text) > max {
		text = clip(text, max) + fmt.Sprintf("\n[... %d more bytes, given to the model but not printed here]", len(o.Text)-max)
	}
	if c.ID != p.last {
		// Several calls were announced: say whose result this is.
		p.printf("-> %s %s\n", c.Name, oneLine(clip(c.Arguments, 100)))
	}
	p.last = ""
	if o.IsError {
		p.printf("(%s, an error for the model:)\n", c.Name)
	}
	p.printf("%s", text)
	if !strings.HasSuffix(text, "\n") {
		p.printf("\n")
	}
}

func (p *Printer) Note(step int, t string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.printf("[limbs agent: %s]\n", t)
}

func (p *Printer) Stop(r Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.Reason == Finished {
		p.printf("\n== finished after %d steps (%d tokens): %s\n", r.Steps, r.Usage.Total(), r.Message)
		return
	}
	p.printf("\n== stopped (%s) after %d steps (%d tokens): %s\n", r.Reason, r.Steps, r.Usage.Total(), r.Message)
}

// Approver decides whether a call runs (--approve ask). why is shown to
// the model when a call is refused.
type Approver interface {
	Approve(ctx context.Context, c ToolCall) (ok bool, why string, err error)
}

// Ask is the Approver of --approve ask: it shows each call on Out and
// reads the answer, a line, from In: y (or yes) runs it; anything else
// refuses it, and what was typed after "n" is the reason the model gets.
// The end of In refuses.
type Ask struct {
	In  io.Reader
	Out io.Writer

	mu      sync.Mutex // guards the fields below
	br      *bufio.Reader
	pending chan askLine // a read that a cancelled question left running
}

type askLine struct {
	s   string
	err error
}

func (a *Ask) Approve(ctx context.Context, c ToolCall) (bool, string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.br == nil {
		a.br = bufio.NewReader(a.In)
	}
	fmt.Fprint(a.Out, printable(fmt.Sprintf("run %s %s? [y/N, or n and a reason] ", c.Name, oneLine(clip(c.Arguments, 2000)))))
	ch := a.pending
	if ch == nil {
		ch = make(chan askLine, 1)
		go func() {
			s, err := a.br.ReadString('\n')
			ch <- askLine{s, err}
		}()
	}
	var l askLine
	select {
	case l = <-ch:
		a.pending = nil
	case <-ctx.Done():
		a.pending = ch
		return false, "", ctx.Err()
	}
	ans := strings.TrimSpace(l.s)
	if l.err != nil && ans == "" {
		fmt.Fprintln(a.Out)
		return false, "no answer (the input ended)", nil
	}
	switch strings.ToLower(ans) {
	case "y", "yes":
		return true, "", nil
	}
	why := strings.TrimLeft(strings.TrimPrefix(strings.TrimPrefix(ans, "no"), "n"), " ,:;-")
	if strings.EqualFold(ans, "n") || strings.EqualFold(ans, "no") {
		why = ""
	}
	return false, why, nil
}
