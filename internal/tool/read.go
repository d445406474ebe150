package tool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/limbs-dev/limbs/internal/screen"
	"github.com/limbs-dev/limbs/internal/wire"
)

// ReadInput is the input of shell_read. Offsets are bytes of the
// command's raw output, 0 being its first byte.
type ReadInput struct {
	Command string `json:"command"`
	// Session is needed only for a command of another session than the
	// default one when its id is in several sessions.
	Session   string `json:"session,omitempty"`
	From      *int64 `json:"from,omitempty"`
	To        *int64 `json:"to,omitempty"`
	TailLines int    `json:"tail_lines,omitempty"`
	Grep      string `json:"grep,omitempty"`
	MaxOutput int    `json:"max_output,omitempty"` // bytes; 0: 32768
}

// ReadOutput is the structured result of shell_read.
type ReadOutput struct {
	Session string `json:"session"`
	Command string `json:"command"`
	// OutputBytes is the size of the command's output as its last result
	// gave it; Running says the command had not ended then.
	OutputBytes int64 `json:"output_bytes"`
	Running     bool  `json:"running,omitempty"`
	// From and To are the range of bytes read; Next, when set, is where
	// the next page of the asked range starts.
	From   int64  `json:"from"`
	To     int64  `json:"to"`
	Next   *int64 `json:"next,omitempty"`
	Output string `json:"output"`
	// Matches are the lines grep found, each with the byte offset where
	// it starts.
	Matches []ReadMatch `json:"matches,omitempty"`
}

// ReadMatch is one line shell_read's grep found.
type ReadMatch struct {
	Offset int64  `json:"offset"`
	Line   string `json:"line"`
}

// maxReadBytes bounds one shell_read page, and grepScanBytes how much
// raw output one grep scans.
const (
	defaultReadBytes = 32768
	maxReadBytes     = 1 << 20
	grepScanBytes    = 256 << 20
)

// ReadTool describes shell_read.
func (sh *Shell) ReadTool() Tool[ReadInput, ReadOutput] {
	return Tool[ReadInput, ReadOutput]{Name: "shell_read", Description: readDescription, InputSchema: []byte(shellReadSchema),
		Handle: func(ctx context.Context, _ Files, _ string, in ReadInput) (Result[ReadOutput], error) {
			return sh.Read(ctx, in)
		}}
}

// Read carries out one shell_read call: lossless paging over the raw
// output of one command, cleaned as limbsd cleans output.
func (sh *Shell) Read(ctx context.Context, in ReadInput) (Result[ReadOutput], error) {
	c := sh.lookup(in.Command, in.Session)
	if c == nil {
		return refusal[ReadOutput](fmt.Sprintf("No command %q was run through these tools (in this connection)%s. Command ids are in the results of shell_run, shell_input and shell_wait.", in.Command, sessionNote(in.Session))), nil
	}
	sh.mu.Lock()
	start, end, running := c.start, c.end, !c.ended
	sh.mu.Unlock()
	total := end - start
	out := ReadOutput{Session: c.session, Command: c.id, OutputBytes: total, Running: running}
	from, to := int64(0), total
	if in.From != nil {
		from = *in.From
	}
	if in.To != nil {
		to = *in.To
	}
	if from < 0 || to > total || from > to {
		return refusal[ReadOutput](fmt.Sprintf("The range %d-%d is outside the output of %s, which has bytes 0-%d so far.", from, to, c.id, total)), nil
	}
	max := int64(in.MaxOutput)
	if max <= 0 {
		max = defaultReadBytes
	}
	max = min(max, maxReadBytes)
	var re *regexp.Regexp
	if in.Grep != "" {
		var err error
		if re, err = regexp.Compile(in.Grep); err != nil {
			return refusal[ReadOutput](fmt.Sprintf("`grep` is not a valid regular expression (RE2 syntax): %v", err)), nil
		}
	}
	var text string
	var err error
	switch {
	case re != nil:
		text, err = sh.grep(ctx, c, re, from, to, max, &out)
	case in.TailLines > 0:
		text, err = sh.tail(ctx, c, in.TailLines, from, to, max, &out)
	default:
		text, err = sh.page(ctx, c, from, to, max, &out)
	}
	if err != nil {
		var re *wire.RemoteError
		if errors.Is(err, wire.ErrGone) && errors.As(err, &re) && len(re.Missing) == 2 {
			return refusal[ReadOutput](fmt.Sprintf("Bytes %d-%d of the output of %s are no longer kept (the sandbox's disk bound cut them). Read the bytes before and after them.", re.Missing[0]-start, re.Missing[1]-start, c.id)), nil
		}
		return Result[ReadOutput]{}, err
	}
	out.Output = text
	var b strings.Builder
	b.WriteString(withNL(text))
	switch {
	case re != nil:
		fmt.Fprintf(&b, "[%d matching line(s) of %q in bytes %d-%d of %d", len(out.Matches), in.Grep, out.From, out.To, total)
	default:
		fmt.Fprintf(&b, "[bytes %d-%d of %d", out.From, out.To, total)
	}
	fmt.Fprintf(&b, " of the output of command %s", c.id)
	if out.Next != nil {
		fmt.Fprintf(&b, "; shell_read %s from=%d", sh.readArgs(c), *out.Next)
		if to != total {
			fmt.Fprintf(&b, " to=%d", to)
		}
		b.WriteString(" continues")
	}
	if running {
		b.WriteString("; the command was still running at its last result: shell_wait shows newer output")
	}
	b.WriteString("]\n")
	return Result[ReadOutput]{Text: b.String(), Out: out}, nil
}

func sessionNote(s string) string {
	if s == "" {
		return ""
	}
	return " in session " + s
}

// page reads [from, to) up to max bytes, cut at the last line break when
// it stops early, so the next page starts on a line.
func (sh *Shell) page(ctx context.Context, c *cmdState, from, to, max int64, out *ReadOutput) (string, error) {
	stop := min(to, from+max)
	raw, err := sh.read(ctx, c.session, c.start+from, c.start+stop)
	if err != nil {
		return "", err
	}
	if stop < to {
		raw = cutHead(raw)
		if len(raw) == 0 { // nothing whole fits: cut inside the line
			raw, _ = sh.read(ctx, c.session, c.start+from, c.start+stop)
		}
		next := from + int64(len(raw))
		out.Next = &next
	}
	out.From, out.To = from, from+int64(len(raw))
	return screen.Clean(raw), nil
}

// tail reads the last n lines of [from, to), at most max bytes of them.
func (sh *Shell) tail(ctx context.Context, c *cmdState, n int, from, to, max int64, out *ReadOutput) (string, error) {
	lo := max64(from, to-max)
	raw, err := sh.read(ctx, c.session, c.start+lo, c.start+to)
	if err != nil {
		return "", err
	}
	body := bytes.TrimSuffix(raw, []byte("\n"))
	cut := 0
	for i, seen := len(body)-1, 0; i >= 0; i-- {
		if body[i] == '\n' {
			seen++
			if seen == n {
				cut = i + 1
				break
			}
		}
	}
	if cut == 0 && lo > from { // the lines go past max: start on a line
		cut = len(raw) - len(cutTail(raw))
	}
	out.From, out.To = lo+int64(cut), to
	return screen.Clean(raw[cut:]), nil
}

// grep scans [from, to) line by line (each raw line cleaned on its own)
// and keeps the lines re matches, up to max bytes of them.
func (sh *Shell) grep(ctx context.Context, c *cmdState, re *regexp.Regexp, from, to, max int64, out *ReadOutput) (string, error) {
	const chunk = 1 << 20
	var b strings.Builder
	pos := from
	out.From = from
	scanned := int64(0)
	for pos < to && scanned < grepScanBytes {
		stop := min(to, pos+chunk)
		raw, err := sh.read(ctx, c.session, c.start+pos, c.start+stop)
		if err != nil {
			return "", err
		}
		if stop < to {
			if cut := cutHead(raw); len(cut) > 0 && bytes.HasSuffix(cut, []byte("\n")) {
				raw = cut
			}
		}
		off := pos
		for len(raw) > 0 {
			i := bytes.IndexByte(raw, '\n')
			l := raw
			if i >= 0 {
				l = raw[:i+1]
			}
			raw = raw[len(l):]
			text := strings.TrimSuffix(screen.Clean(l), "\n")
			if re.MatchString(text) {
				if int64(b.Len()+len(text)) > max && len(out.Matches) > 0 {
					next := off
					out.Next, out.To = &next, off
					return b.String(), nil
				}
				out.Matches = append(out.Matches, ReadMatch{Offset: off, Line: text})
				fmt.Fprintf(&b, "%d: %s\n", off, text)
			}
			off += int64(len(l))
		}
		scanned += off - pos
		pos = off
	}
	out.To = pos
	if pos < to {
		next := pos
		out.Next = &next
	}
	return b.String(), nil
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}
