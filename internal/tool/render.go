package tool

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/limbs-dev/limbs/internal/screen"
	"github.com/limbs-dev/limbs/internal/wire"
)

// finish turns one result of limbsd into the model's text and the same
// facts, and records what it says of the command. Every note in the text
// is the tool's own, written here around the output (or, for a truncated
// output, between its head and tail as they are put together): nothing is
// ever replaced inside the text a command printed.
func (sh *Shell) finish(ctx context.Context, c *cmdState, r wire.Result, until *wire.Until) (Result[ShellOutput], error) {
	out := ShellOutput{
		Session: c.session, Command: r.CommandID, Status: r.Status, ExitCode: r.ExitCode,
		Matched: r.Matched, MatchedText: r.MatchedText,
		Cwd: r.Cwd, DurationMs: r.DurationMs, WaitingForInput: r.WaitingForInput, EchoOff: r.EchoOff,
		BackgroundOutput: r.BackgroundOutput, ShellExited: r.ShellExited, ShellReplaced: r.ShellReplaced,
		EndRecovered: r.EndRecovered,
		OutputBytes:  r.OffsetEnd - r.OffsetStart,
	}
	if r.CommandID == "" {
		out.Status = "idle"
	}
	backgroundOf(&out, r) // background.go
	if out.ExitCode != nil {
		out.Signal = signalOf(*out.ExitCode)
	}
	sh.mu.Lock()
	prevEnd := c.end
	sh.mu.Unlock()
	rel := func(off int64) int64 { return off - r.OffsetStart }
	if r.CommandID != "" && r.ChunkStart > prevEnd {
		out.Unseen = []int64{rel(prevEnd), rel(r.ChunkStart)}
	}

	text := r.Output
	if r.CommandID != "" && !r.AltScreen {
		out.Shown = [][2]int64{{rel(r.ChunkStart), rel(r.OffsetEnd)}}
	}
	var readErr error
	if r.Truncated && !r.AltScreen {
		// Never limbsd's text: its note names an HTTP route.
		text, out.Shown, readErr = sh.headTail(ctx, c.session, r)
		out.Truncated = true
	}
	sh.mu.Lock()
	prevAlt := c.last.AltScreen
	sh.mu.Unlock()
	// After a screen excerpt there is no last line the model saw to redraw.
	out.Overwrite = r.Overwrite && !r.AltScreen && !prevAlt && text != ""
	if !r.AltScreen {
		text, out.ClampedLines = clampLines(text, sh.opts.MaxLine)
	}
	out.Output = text

	running := r.Status == wire.StatusRunning
	var scr *wire.Screen
	if running && (r.AltScreen || r.WaitingForInput) {
		if s, err := sh.s.Screen(ctx, c.session); err == nil {
			scr = &s
		}
	}

	var b strings.Builder
	line := func(format string, a ...any) {
		fmt.Fprintf(&b, format, a...)
		b.WriteByte('\n')
	}
	if r.BackgroundOutput != "" {
		line("[output of background jobs, printed while no command ran:]")
		b.WriteString(withNL(r.BackgroundOutput))
		line("[end of background output]")
	}
	if running && r.AltScreen {
		sh.fullScreen(&out, c, r, scr)
		line("[%s shows a %s on the terminal; its screen now:]", programOr(out.Program, "a program"), screenWord(out.OnScreen))
		out.screen = text
		if scr != nil {
			out.screen = excerpt(scr.Lines, maxExcerptRows)
		}
		b.WriteString(withNL(out.screen))
	} else {
		b.WriteString(withNL(text))
	}
	if out.Overwrite {
		line("[the first line above redraws the last line of the previous result (a line rewritten in place, like a progress bar)]")
	}
	if len(r.LogMissing) == 2 {
		out.Missing = []int64{rel(r.LogMissing[0]), rel(r.LogMissing[1])}
		line("[bytes %d-%d of this command's output are no longer kept (the sandbox's disk bound for output cut them); the rest stays readable]", out.Missing[0], out.Missing[1])
	}
	if out.Unseen != nil {
		line("[bytes %d-%d of this command's output were not shown in any result; shell_read %s from=%d to=%d returns them]", out.Unseen[0], out.Unseen[1], sh.readArgs(c), out.Unseen[0], out.Unseen[1])
	}
	if out.Truncated {
		if readErr != nil {
			line("[output of %d bytes not shown: reading it back failed (%s); shell_read %s returns what is still kept]", r.OffsetEnd-r.ChunkStart, detail(readErr), sh.readArgs(c))
		} else if len(out.Shown) == 2 {
			s := out.Shown
			if c.id == "" {
				line("[output truncated: bytes %d-%d and %d-%d of %d shown]", s[0][0], s[0][1], s[1][0], s[1][1], r.OffsetEnd-r.OffsetStart)
			} else {
				line("[output truncated: bytes %d-%d and %d-%d of %d shown; shell_read %s from=%d to=%d returns the rest]", s[0][0], s[0][1], s[1][0], s[1][1], out.OutputBytes, sh.readArgs(c), s[0][1], s[1][0])
			}
		}
	}
	if out.ClampedLines > 0 {
		line("[%d line(s) longer than %d characters were clamped to their head and tail; shell_read %s shows them whole]", out.ClampedLines, sh.opts.MaxLine, sh.readArgs(c))
	}

	switch {
	case out.Status == "idle":
		line("[no command was running: this is what the terminal printed after the input; cwd %s]", r.Cwd)
	case running && r.AltScreen:
		if r.Matched != "" {
			line("[stopped waiting: %s]", matchedWords(r, until))
		}
		line("[still running (command %s). %s. shell_screen shows the screen again]", r.CommandID, leaveWords(out.Leave))
	case running && r.WaitingForInput:
		sh.prompt(&out, c, r, scr, text)
		switch {
		case out.OnScreen == "pager":
			line("[a pager (%s) is waiting for a key (command %s), prompt: %q. %s]", programOr(out.Program, "pager"), r.CommandID, out.Prompt, leaveWords(out.Leave))
		case out.OnScreen == "confirm":
			line("[waiting for input (command %s): a yes/no question: %q. Answer with shell_input text=\"y\" keys=[\"Enter\"] (or \"n\")]", r.CommandID, out.Prompt)
		case r.EchoOff:
			line("[waiting for input with echo off (a password or passphrase prompt; command %s): %q. shell_input text=\"...\" keys=[\"Enter\"] answers it; what you type is not shown]", r.CommandID, out.Prompt)
		default:
			line("[waiting for input (command %s) at the prompt: %q. shell_input text=\"...\" keys=[\"Enter\"] answers it; shell_input keys=[\"C-c\"] interrupts it]", r.CommandID, out.Prompt)
		}
	case running && r.Matched != "":
		line("[stopped waiting: %s; the command is still running after %s (command %s; cwd %s). shell_wait waits for more output or the end; shell_input types into it; shell_input keys=[\"C-c\"] interrupts it]", matchedWords(r, until), dur(r.DurationMs), r.CommandID, r.Cwd)
	case running:
		line("[still running after %s (command %s; cwd %s). shell_wait waits for more output or the end; shell_input types into it; shell_input keys=[\"C-c\"] interrupts it]", dur(r.DurationMs), r.CommandID, r.Cwd)
	default:
		line("[%s]", endWords(r, c.timeout))
		switch {
		case r.ShellReplaced:
			line("[the command replaced the shell with another shell, so it has no exit code; a fresh shell now runs in %s with the exported environment saved before the command; unexported variables, functions, aliases and background jobs are gone]", r.Cwd)
		case r.ShellExited:
			line("[the shell itself exited during the command; a fresh shell now runs in %s with the old exported environment; unexported variables, functions, aliases and background jobs are gone]", r.Cwd)
		}
		if r.EndRecovered {
			line("[%s]", recoveredWords(r))
		}
		if n := backgroundNote(out); n != "" {
			line("%s", n)
		}
		if r.Matched != "" {
			line("[%s: a process the command left running opened it]", matchedWords(r, until))
		} else if until != nil && until.Port != nil && out.BackgroundCount > 0 {
			line("[port %d is not listening yet: the command's background processes did not open it within the yield; shell_run with until {\"port\": %d} and a command such as `sleep 60` waits again]", *until.Port, *until.Port)
		}
	}

	sh.mu.Lock()
	c.end = max(c.end, r.OffsetEnd)
	c.last = r
	c.last.Output, c.last.BackgroundOutput = "", "" // a Shell keeps many
	if l := lastLine(text); l != "" {
		c.lastLine = l
	}
	if running {
		sh.busy[c.session] = r.CommandID
	} else if r.CommandID != "" {
		c.ended = true
		if sh.busy[c.session] == r.CommandID {
			delete(sh.busy, c.session)
		}
	}
	if c.session == sh.def && r.Cwd != "" {
		sh.cwd = r.Cwd
	}
	sh.mu.Unlock()
	return Result[ShellOutput]{Text: b.String(), Out: out}, nil
}

// endWords states how an ended command ended.
func endWords(r wire.Result, timeout ...float64) string {
	code := "no exit code"
	if r.ExitCode != nil {
		code = fmt.Sprintf("exit code %d", *r.ExitCode)
		if s := signalOf(*r.ExitCode); s != "" {
			code += " (" + s + ")"
		}
	}
	rest := fmt.Sprintf("%s; cwd %s; took %s; command %s", code, r.Cwd, dur(r.DurationMs), r.CommandID)
	switch r.Status {
	case wire.StatusTimeout:
		t := ""
		if len(timeout) > 0 && timeout[0] > 0 {
			t = fmt.Sprintf(" after %s (timeout=%g)", secs(timeout[0]), timeout[0])
		}
		return "timed out" + t + ": the command was stopped; " + rest
	case wire.StatusInterrupted:
		return "interrupted: the command was stopped; " + rest
	}
	return rest
}

// headTail rebuilds a truncated output from the raw stream: the head and
// the tail, each up to half of MaxOutput bytes cut at a line boundary,
// cleaned as limbsd cleans output, with the tool's own note between them.
// The ranges are relative to the command's first byte.
func (sh *Shell) headTail(ctx context.Context, sid string, r wire.Result) (string, [][2]int64, error) {
	lo, hi := r.ChunkStart, r.OffsetEnd
	rel := func(off int64) int64 { return off - r.OffsetStart }
	half := int64(sh.opts.MaxOutput / 2)
	if hi-lo <= 2*half {
		raw, err := sh.read(ctx, sid, lo, hi)
		if err != nil {
			return "", nil, err
		}
		return screen.Clean(raw), [][2]int64{{rel(lo), rel(hi)}}, nil
	}
	head, err := sh.read(ctx, sid, lo, lo+half)
	if err != nil {
		return "", nil, err
	}
	head = cutHead(head)
	tail, err := sh.read(ctx, sid, hi-half, hi)
	if err != nil {
		return "", nil, err
	}
	tail = cutTail(tail)
	headEnd, tailStart := lo+int64(len(head)), hi-int64(len(tail))
	text := withNL(screen.Clean(head)) +
		fmt.Sprintf("[... bytes %d-%d (%d bytes) not shown ...]\n", rel(headEnd), rel(tailStart), tailStart-headEnd) +
		screen.Clean(tail)
	return text, [][2]int64{{rel(lo), rel(headEnd)}, {rel(tailStart), rel(hi)}}, nil
}

// cutHead ends b after its last newline, or at a rune boundary when it
// has none (one long line).
func cutHead(b []byte) []byte {
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[:i+1]
	}
	for n := 0; n < utf8.UTFMax && len(b) > 0 && !utf8.RuneStart(b[len(b)-1]); n++ {
		b = b[:len(b)-1]
	}
	return b
}

// cutTail starts b after its first newline, or at a rune boundary.
func cutTail(b []byte) []byte {
	if i := bytes.IndexByte(b, '\n'); i >= 0 && i+1 < len(b) {
		return b[i+1:]
	}
	for n := 0; n < utf8.UTFMax && len(b) > 0 && !utf8.RuneStart(b[0]); n++ {
		b = b[1:]
	}
	return b
}

// read returns the raw bytes [from, to) of sid's stream.
func (sh *Shell) read(ctx context.Context, sid string, from, to int64) ([]byte, error) {
	rc, err := sh.s.Output(ctx, sid, from, to)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, to-from))
	if err != nil {
		return nil, err
	}
	return b, nil
}

// clampLines cuts every line longer than max characters to its head and
// tail with the tool's note between; it returns how many it cut.
func clampLines(text string, max int) (string, int) {
	if len(text) <= max {
		return text, 0
	}
	ls := strings.SplitAfter(text, "\n")
	n := 0
	for i, l := range ls {
		if utf8.RuneCountInString(l) <= max {
			continue
		}
		nl := strings.HasSuffix(l, "\n")
		r := []rune(strings.TrimSuffix(l, "\n"))
		h, t := max*3/4, max/4
		ls[i] = string(r[:h]) + fmt.Sprintf(" [... %d characters of this line not shown ...] ", len(r)-h-t) + string(r[len(r)-t:])
		if nl {
			ls[i] += "\n"
		}
		n++
	}
	return strings.Join(ls, ""), n
}

var (
	confirmRe = regexp.MustCompile(`(?i)(\[y/n\]|\(y/n\)|\[yes/no\]|\(yes/no(/\[fingerprint\])?\))\s*\??\s*$`)
	pagerRe   = regexp.MustCompile(`(--More--|\(END\)|^:$|^lines \d+-\d+|Manual page .* line \d+)`)
)

// prompt fills in the prompt a command waiting for input shows: the line
// of the cursor on the screen, else the last line of output.
func (sh *Shell) prompt(out *ShellOutput, c *cmdState, r wire.Result, scr *wire.Screen, text string) {
	p := ""
	if scr != nil && scr.Cursor.Row >= 0 && scr.Cursor.Row < len(scr.Lines) {
		p = strings.TrimRight(scr.Lines[scr.Cursor.Row], " ")
	}
	if p == "" {
		p = lastLine(text)
	}
	if p == "" {
		sh.mu.Lock()
		p = c.lastLine
		sh.mu.Unlock()
	}
	out.Prompt = p
	switch {
	case pagerRe.MatchString(p):
		out.OnScreen = "pager"
		out.Program = programIn(sh.commandOf(c))
		out.Leave = &InputInput{Text: "q"}
	case confirmRe.MatchString(p):
		out.OnScreen = "confirm"
		out.Leave = &InputInput{Text: "y", Keys: []string{"Enter"}}
	}
}

// fullScreen fills in the program on the alternate screen and how to
// leave it.
func (sh *Shell) fullScreen(out *ShellOutput, c *cmdState, r wire.Result, scr *wire.Screen) {
	out.Program = programIn(sh.commandOf(c))
	last := ""
	if scr != nil {
		for i := len(scr.Lines) - 1; i >= 0; i-- {
			if l := strings.TrimSpace(scr.Lines[i]); l != "" {
				last = l
				break
			}
		}
		if scr.Cursor.Row >= 0 && scr.Cursor.Row < len(scr.Lines) {
			out.Prompt = strings.TrimRight(scr.Lines[scr.Cursor.Row], " ")
		}
	}
	p := leavePrograms[out.Program]
	switch {
	case p.kind == "pager" || p.kind == "" && pagerRe.MatchString(last):
		out.OnScreen = "pager"
		out.Leave = &InputInput{Text: "q"}
	default:
		out.OnScreen = "full_screen"
		if p.leave != nil {
			l := *p.leave
			out.Leave = &l
		}
	}
}

type leave struct {
	kind  string // pager or full_screen
	leave *InputInput
}

// leavePrograms are the full-screen programs whose way out is known.
var leavePrograms = map[string]leave{
	"less": {"pager", nil}, "more": {"pager", nil}, "most": {"pager", nil}, "man": {"pager", nil},
	"git": {"pager", nil}, "journalctl": {"pager", nil}, "systemctl": {"pager", nil},
	"vim":   {"full_screen", &InputInput{Text: ":q!", Keys: []string{"Enter"}}},
	"vi":    {"full_screen", &InputInput{Text: ":q!", Keys: []string{"Enter"}}},
	"nvim":  {"full_screen", &InputInput{Text: ":q!", Keys: []string{"Enter"}}},
	"view":  {"full_screen", &InputInput{Text: ":q!", Keys: []string{"Enter"}}},
	"nano":  {"full_screen", &InputInput{Keys: []string{"C-x"}}},
	"emacs": {"full_screen", &InputInput{Keys: []string{"C-x", "C-c"}}},
	"top":   {"full_screen", &InputInput{Text: "q"}},
	"htop":  {"full_screen", &InputInput{Text: "q"}},
	"btop":  {"full_screen", &InputInput{Text: "q"}},
	"watch": {"full_screen", &InputInput{Keys: []string{"C-c"}}},
	"tig":   {"full_screen", &InputInput{Text: "q"}},
}

// programIn is the last word of command that names a program whose way
// out is known (seq 1 100 | less: less), else the first program.
func programIn(command string) string {
	first := ""
	known := ""
	for _, seg := range segmentSep.Split(command, -1) {
		w := programWords(strings.Fields(seg))
		if len(w) == 0 {
			continue
		}
		if first == "" {
			first = w[0]
		}
		if _, ok := leavePrograms[w[0]]; ok {
			known = w[0]
		}
	}
	if known != "" {
		return known
	}
	return first
}

func leaveWords(l *InputInput) string {
	if l == nil {
		return "Most full-screen programs leave with shell_input text=\"q\" or keys=[\"C-c\"]; read the screen for its own hint"
	}
	return "Leave it with " + inputWords(*l) + extraLeave(*l)
}

func extraLeave(l InputInput) string {
	if l.Text == ":q!" {
		return " (discards changes; text=\":wq\" saves; press keys=[\"Escape\"] first when in insert mode)"
	}
	return ""
}

// inputWords writes an input as the model would call shell_input.
func inputWords(l InputInput) string {
	s := "shell_input"
	if l.Text != "" {
		s += fmt.Sprintf(" text=%q", l.Text)
	}
	if len(l.Keys) > 0 {
		q := make([]string, len(l.Keys))
		for i, k := range l.Keys {
			q[i] = fmt.Sprintf("%q", k)
		}
		s += " keys=[" + strings.Join(q, ", ") + "]"
	}
	return s
}

func screenWord(kind string) string {
	if kind == "pager" {
		return "pager"
	}
	return "full-screen display"
}

func programOr(p, or string) string {
	if p == "" {
		return or
	}
	return p
}

// maxExcerptRows is the most screen rows a result shows of a full-screen
// program (shell_screen shows them all).
const maxExcerptRows = 24

// excerpt is the screen's rows without the blank rows at the bottom, a run
// of more than 3 equal rows (vim's ~) as the row and a note, and at most
// max rows (head and tail) with a note between.
func excerpt(lines []string, max int) string {
	ls := lines
	for len(ls) > 0 && strings.TrimSpace(ls[len(ls)-1]) == "" {
		ls = ls[:len(ls)-1]
	}
	var rows []string
	for i := 0; i < len(ls); {
		j := i
		for j < len(ls) && ls[j] == ls[i] {
			j++
		}
		if n := j - i; n > 3 {
			rows = append(rows, ls[i], fmt.Sprintf("[... the row above %d more times ...]", n-1))
		} else {
			rows = append(rows, ls[i:j]...)
		}
		i = j
	}
	if len(rows) > max {
		h := max / 2
		t := max - h
		rows = append(append(rows[:h:h], fmt.Sprintf("[... %d rows of the screen not shown: shell_screen shows it all ...]", len(rows)-h-t)), rows[len(rows)-t:]...)
	}
	return strings.Join(rows, "\n")
}

// screenText is the screen's rows without the blank rows at the bottom.
func screenText(s *wire.Screen) string {
	ls := s.Lines
	for len(ls) > 0 && strings.TrimSpace(ls[len(ls)-1]) == "" {
		ls = ls[:len(ls)-1]
	}
	return strings.Join(ls, "\n")
}

// readArgs names a command for shell_read: by id, with its session when
// that is not the default one.
func (sh *Shell) readArgs(c *cmdState) string {
	sh.mu.Lock()
	def := sh.def
	sh.mu.Unlock()
	if c.session == def {
		return "command=" + c.id
	}
	return "command=" + c.id + " session=" + c.session
}

func withNL(s string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		return s + "\n"
	}
	return s
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return strings.TrimRight(s, " ")
}

// dur writes a duration for the model: 12 ms, 3.4 s.
func dur(ms int64) string {
	if ms < 1000 {
		return fmt.Sprintf("%d ms", ms)
	}
	return fmt.Sprintf("%.1f s", float64(ms)/1000)
}

func secs(s float64) string {
	return fmt.Sprintf("%g s", s)
}

// signals are Linux's names of the signals 1-31.
var signals = [...]string{"", "SIGHUP", "SIGINT", "SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS",
	"SIGFPE", "SIGKILL", "SIGUSR1", "SIGSEGV", "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGTERM",
	"SIGSTKFLT", "SIGCHLD", "SIGCONT", "SIGSTOP", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGURG",
	"SIGXCPU", "SIGXFSZ", "SIGVTALRM", "SIGPROF", "SIGWINCH", "SIGIO", "SIGPWR", "SIGSYS"}

// signalOf names the signal of an exit code 128+N, as the shell reports
// a process killed by signal N.
func signalOf(code int) string {
	if n := code - 128; n > 0 && n < len(signals) {
		return signals[n]
	}
	return ""
}

func (sh *Shell) commandOf(c *cmdState) string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return c.command
}

// recoveredWords explains an end limbsd read from the shell's process
// state instead of its end marker, in the tool's words (limbsd's note names
// its HTTP routes).
func recoveredWords(r wire.Result) string {
	w := "the shell's end-of-command hooks did not report this command, so its end was read from the shell's process state (back at its prompt)"
	if r.ExitCode == nil {
		w += "; its exit code is unknown"
	}
	if strings.Contains(r.EndNote, "descriptor 251") {
		w += "; the shell closed the descriptor limbs needs for exact ends: session action=restart gives a fresh shell"
	}
	return w
}
