package agent

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Stuck detection looks at the steps since the last note it gave:
//
//   - the same action (tool calls with the same arguments) with the same
//     observation repeatAfter times in a row;
//   - the same error repeatAfter times in a row, whatever the actions;
//   - two different steps alternating for alternateAfter steps.
//
// The first time one holds, the model gets a note; if one holds again
// after the note, the run stops. Observations are compared without what
// changes on every run of the same command (durations, command ids,
// pids). A step whose every call shows a command still running is not
// counted: waiting on a long command is not being stuck.

const (
	repeatAfter    = 3
	alternateAfter = 6
)

type stuckState int

const (
	notStuck stuckState = iota
	stuckNote
	stuckStop
)

type stepSig struct {
	action, obs string
	isErr       bool
}

type stuckDetector struct {
	hist  []stepSig // since the last note
	noted bool
	why   string // what the last detection saw
}

var volatile = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`took [0-9.]+ ?[a-zµ]*`), "took T"},
	{regexp.MustCompile(`\bc_[0-9]+\b`), "c_N"},
	{regexp.MustCompile(`\bpid [0-9]+\b`), "pid N"},
}

func normalize(s string) string {
	for _, v := range volatile {
		s = v.re.ReplaceAllString(s, v.with)
	}
	return s
}

// canonical is the arguments re-encoded (sorted keys), or as sent when
// they are not JSON.
func canonical(args string) string {
	var v any
	if json.Unmarshal([]byte(args), &v) != nil {
		return strings.TrimSpace(args)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// running: the observation shows a command that still runs.
func running(o Observation) bool {
	if o.Structured == nil {
		return false
	}
	b, err := json.Marshal(o.Structured)
	if err != nil {
		return false
	}
	var s struct {
		Status  string `json:"status"`
		Results []struct {
			Status string `json:"status"`
		} `json:"results"`
	}
	if json.Unmarshal(b, &s) != nil {
		return false
	}
	if len(s.Results) > 0 {
		for _, r := range s.Results {
			if r.Status != "running" {
				return false
			}
		}
		return true
	}
	return s.Status == "running"
}

func (d *stuckDetector) add(calls []ToolCall, obs []Observation) stuckState {
	var sig stepSig
	sig.isErr = len(obs) > 0
	waiting := len(obs) > 0
	for i, c := range calls {
		sig.action += c.Name + " " + canonical(c.Arguments) + "\n"
		sig.obs += normalize(obs[i].Text) + "\n"
		sig.isErr = sig.isErr && obs[i].IsError
		waiting = waiting && running(obs[i])
	}
	if waiting {
		return notStuck
	}
	d.hist = append(d.hist, sig)
	h, n := d.hist, len(d.hist)
	d.why = ""
	switch {
	case n >= repeatAfter && all(h[n-repeatAfter:], func(s stepSig) bool { return s == sig }):
		d.why = fmt.Sprintf("the same call (%s) got the same result %d times in a row", oneLine(clip(calls[0].Name+" "+calls[0].Arguments, 200)), repeatAfter)
	case n >= repeatAfter && all(h[n-repeatAfter:], func(s stepSig) bool { return s.isErr && s.obs == sig.obs }):
		d.why = fmt.Sprintf("the same error came back %d times in a row: %s", repeatAfter, oneLine(clip(obs[0].Text, 300)))
	case n >= alternateAfter && h[n-1] != h[n-2] && alternating(h[n-alternateAfter:]):
		d.why = fmt.Sprintf("it alternated between the same two steps %d times", alternateAfter)
	}
	if d.why == "" {
		return notStuck
	}
	d.hist = nil
	if d.noted {
		return stuckStop
	}
	d.noted = true
	return stuckNote
}

func alternating(h []stepSig) bool {
	for i := 2; i < len(h); i++ {
		if h[i] != h[i-2] {
			return false
		}
	}
	return true
}

func all(h []stepSig, f func(stepSig) bool) bool {
	for _, s := range h {
		if !f(s) {
			return false
		}
	}
	return true
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
