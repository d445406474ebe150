package agent

import (
	"encoding/json"
	"fmt"
	"regexp"
)

// The context window: before each request the conversation is kept
// under Config.ContextTokens (estimated at 4 characters a token) by
// shortening the oldest observations first, each to its head and its tail
// (where the fact block is) with a note naming the command, so that the
// model can read the whole output back with shell_read. The observations
// of the latest step are never shortened, nor is anything but a tool
// result: the task, the model's own messages and the loop's notes stay.

// commandRef names the command an observation showed.
type commandRef struct {
	Session, Command string
}

// refOf finds the command an observation showed: the structured result
// of the shell tools (session and command), else the "command c_N" of its
// fact block.
func refOf(o Observation) *commandRef {
	if o.Structured != nil {
		b, err := json.Marshal(o.Structured)
		if err == nil {
			var one struct {
				Session string `json:"session"`
				Command string `json:"command"`
				Results []struct {
					Session string `json:"session"`
					Command string `json:"command"`
				} `json:"results"`
			}
			if json.Unmarshal(b, &one) == nil {
				if one.Command == "" && len(one.Results) == 1 {
					one.Session, one.Command = one.Results[0].Session, one.Results[0].Command
				}
				if one.Command != "" {
					return &commandRef{Session: one.Session, Command: one.Command}
				}
			}
		}
	}
	if m := commandRE.FindStringSubmatch(o.Text); m != nil {
		return &commandRef{Command: m[1]}
	}
	return nil
}

var commandRE = regexp.MustCompile(`\bcommand (c_[0-9]+)\b`)

// Shortened observations keep this much of their head and their tail.
const (
	keepHead = 400
	keepTail = 800
)

// budget is the window in characters.
func (r *run) budget() int { return r.cfg.ContextTokens * 4 }

// chars is the size of the conversation as sent, in characters.
func (r *run) chars() int {
	n := 0
	for _, m := range r.msgs {
		n += len(m.text)
		for _, c := range m.calls {
			n += len(c.Name) + len(c.Arguments)
		}
	}
	return n
}

// fit shortens old observations, oldest first, until the conversation
// holds at most budget characters. It reports whether it did fit.
func (r *run) fit(budget int) bool {
	latest := 0
	for _, m := range r.msgs {
		if m.role == "tool" {
			latest = max(latest, m.step)
		}
	}
	for i := range r.msgs {
		if r.chars() <= budget {
			return true
		}
		m := &r.msgs[i]
		if m.role != "tool" || m.short || m.step == latest || len(m.full) <= keepHead+keepTail+200 {
			continue
		}
		m.text, m.short = r.shorten(m), true
	}
	return r.chars() <= budget
}

// shorten is the short form of an observation.
func (r *run) shorten(m *message) string {
	head, tail := m.full[:keepHead], m.full[len(m.full)-keepTail:]
	for len(head) > 0 && head[len(head)-1]&0xC0 == 0x80 {
		head = head[:len(head)-1]
	}
	for len(tail) > 0 && tail[0]&0xC0 == 0x80 {
		tail = tail[1:]
	}
	gone := len(m.full) - len(head) - len(tail)
	back := "run the command again to see it"
	if m.ref != nil {
		if _, ok := r.specs["shell_read"]; ok {
			back = fmt.Sprintf("shell_read command=%q", m.ref.Command)
			if m.ref.Session != "" {
				back += fmt.Sprintf(" session=%q", m.ref.Session)
			}
			back += " reads it back losslessly"
		}
		back = "command " + m.ref.Command + "; " + back
	}
	return fmt.Sprintf("%s\n[... %d characters of this old result left out to keep the context small (%s) ...]\n%s", head, gone, back, tail)
}
