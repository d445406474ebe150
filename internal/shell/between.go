package shell

import (
	"bytes"

	"github.com/limbs-dev/limbs/internal/wire"
)

// Output between commands.
//
// What the terminal shows while no command runs is the shell's prompt,
// the shell's notes about its jobs, and whatever background jobs print.
// The next command's first result carries it: between is the stream range
// from the previous command's end to this one's start (raw, prompt
// included, readable through GET .../output), and background_output is
// that output cleaned, without the prompt. Nothing is dropped.
//
// The prompt is told apart without guessing at its text: it is the last
// line of the shell's output after an end marker up to the first read
// that does not end a line (a prompt waits on its own line; notes such as
// "[1]+ Done" are whole lines). The lines of a prompt of several lines
// but the last one count as output between commands.

// gapState follows the output since the last command's end; guarded by
// Session.mu.
type gapState struct {
	open       bool  // an end marker came, and no command started since
	afterEnd   bool  // the prompt has not been seen
	from       int64 // stream offset of the end marker
	promptFrom int64 // the prompt's line, once seen
	promptTo   int64
}

// gapRanges is what a command hands out in its first result.
type gapRanges struct {
	from, to      int64 // the whole gap
	prompt, after int64 // the prompt's line [prompt, after); both to when none
}

// gapStartLocked notes an end marker: the stream is at its offset.
func (s *Session) gapStartLocked() {
	end := s.out.size()
	s.gap = gapState{open: true, afterEnd: true, from: end, promptFrom: -1}
}

// gapOutputLocked notes n bytes at stream offset off, appended while no
// command runs.
func (s *Session) gapOutputLocked(off int64, n int) {
	if !s.gap.open || !s.gap.afterEnd || n == 0 {
		return
	}
	var last [1]byte
	if _, err := s.out.readAt(last[:], off+int64(n)-1); err != nil || last[0] == '\n' {
		return
	}
	// This read ends the prompt; its line starts after the last newline.
	end := off + int64(n)
	start := s.gap.from
	const look = 4096
	from := max(s.gap.from, end-look)
	b := make([]byte, end-from)
	if got, _ := s.out.readAt(b, from); got == len(b) {
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			start = from + int64(i) + 1
		} else if from > s.gap.from {
			start = from
		}
	}
	s.gap.afterEnd = false
	s.gap.promptFrom, s.gap.promptTo = start, end
}

// gapEndLocked hands the output between commands to c, which starts now.
func (s *Session) gapEndLocked(c *command) {
	g := s.gap
	s.gap = gapState{}
	now := s.out.size()
	if !g.open || now <= g.from {
		return
	}
	r := &gapRanges{from: g.from, to: now, prompt: now, after: now}
	if g.promptFrom >= 0 {
		r.prompt, r.after = g.promptFrom, g.promptTo
	}
	if r.prompt == r.from && r.after == r.to {
		return // only the prompt
	}
	c.between = r
}

// betweenResult fills in the output between commands of c's first result.
func (s *Session) betweenResult(c *command, r *wire.Result, maxOut int) {
	s.mu.Lock()
	g := c.between
	c.between = nil
	s.mu.Unlock()
	if g == nil {
		return
	}
	before, _ := s.cleanRange(g.from, g.prompt, maxOut)
	after, _ := s.cleanRange(g.after, g.to, maxOut)
	if before+after == "" {
		return
	}
	r.Between = []int64{g.from, g.to}
	r.BackgroundOutput = before + after
}
