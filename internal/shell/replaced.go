package shell

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A command that replaces the shell (exec bash, exec bash -l, exec sh)
// never ends the way others do: the new program has none of limbs'
// hooks, so no end comes. The process state says what happened: the
// shell's pid now runs another image (its executable or its command line
// changed), it is the terminal's foreground process group, and it is
// asleep reading the terminal: a shell at its prompt. limbsd then ends
// the command (exit_code null, shell_replaced and shell_exited true: no
// status exists for a command that did not return), and replaces the
// new shell with a fresh one of its own, in the cwd the new shell had and
// with the exported environment saved before the command.

// imageOf names what pid runs: its executable and its command line.
func imageOf(pid int) string {
	dir := "/proc/" + strconv.Itoa(pid)
	exe, _ := os.Readlink(dir + "/exe")
	cmdline, _ := os.ReadFile(dir + "/cmdline")
	return exe + "\x00\x00" + string(cmdline)
}

// shellNames are the programs taken to be a shell at its prompt when
// one replaces limbs' shell; any other program (exec python3) is a
// command still running.
var shellNames = map[string]bool{
	"bash": true, "sh": true, "dash": true, "ash": true, "busybox": true,
	"zsh": true, "ksh": true, "mksh": true, "ksh93": true, "fish": true,
}

// replacedAtPrompt reports whether p's process runs a shell other than
// the one limbs started, and waits at its prompt.
func (p *proc) replacedAtPrompt(image string) bool {
	if image == "" {
		return false
	}
	now := imageOf(p.pid)
	if now == image || strings.HasPrefix(now, "\x00") {
		return false // the same image, or gone
	}
	exe, _, _ := strings.Cut(now, "\x00\x00")
	if !shellNames[strings.TrimSuffix(filepath.Base(exe), " (deleted)")] {
		return false
	}
	if p.foreground() != p.pid {
		return false
	}
	return p.shellReadsTerminal()
}

// shellReadsTerminal reports whether the shell process itself sleeps in
// a read of the terminal, or in select or poll with the terminal among
// what it waits to read (readline).
func (p *proc) shellReadsTerminal() bool { return p.sleepsOnTerminal(p.pid, true) }

// recoverReplaced ends c when the shell was replaced by another one now
// at its prompt; it reports whether it did (c ends once the replacement
// is killed and reaped).
func (s *Session) recoverReplaced(c *command) bool {
	s.mu.Lock()
	p := s.p
	ok := p != nil && s.cur == c && c.started && !c.ended
	image := ""
	if ok {
		image = p.image
	}
	s.mu.Unlock()
	if !ok || !p.replacedAtPrompt(image) {
		return false
	}
	s.mu.Lock()
	if s.p != p || s.cur != c || c.ended {
		s.mu.Unlock()
		return false
	}
	c.replaced = true
	if d := cwdOf(p.pid); d != "" {
		s.cwd = d
	}
	s.mu.Unlock()
	s.log.Info("the shell was replaced by another at its prompt: ending the command and starting a fresh shell")
	if err := p.killTree(); err != nil {
		s.log.Warn("ending a replaced shell", "err", err)
	}
	return true
}

// replacedWait bounds how long a result waits for a replaced shell,
// killed, to be reaped.
const replacedWait = 10 * time.Second
