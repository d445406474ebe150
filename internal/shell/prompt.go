package shell

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Whether bash is back at its own prompt is read from the process state,
// not from markers (which a user can lose: recover.go). bash asleep at its
// top-level prompt and bash asleep in `read -e` inside a command both
// sleep in pselect6 on the terminal, but the user-space stack pointer
// tells them apart: readline at the top-level prompt is always called
// from the same depth of bash's main loop, so /proc/PID/syscall shows the
// same sp at every prompt of that process (mid-line too), while `read -e`
// in a command or a function, PS2, or vi command mode with a pending ESC
// (pselect with a timeout) sleep at other depths; `read` without -e and
// `select` sleep in read. limbsd learns the prompt's sp of each shell
// process at moments it knows the shell is at its prompt (the first
// prompt, and after proven ends while nothing was typed since) and
// compares.

// maxPromptSPs caps the stack pointers learned for one shell process.
const maxPromptSPs = 4

// promptLearns is how many proven ends of a shell process are sampled:
// the sp at the prompt does not change, so once it is seen a few times
// the ends cost nothing more.
const promptLearns = 3

// promptState is what a proc knows of its prompt; guarded by mu.
type promptState struct {
	mu      sync.Mutex
	sps     []uint64
	learns  int  // samples taken that found the prompt
	tries   int  // learners started once a prompt was known
	running bool // a learner is sampling
	// first is closed when the learner of the first prompt is done.
	first     chan struct{}
	firstOnce sync.Once
}

// firstLearned is closed once the first prompt was sampled (or given up
// on).
func (p *proc) firstLearned() chan struct{} {
	p.prompt.mu.Lock()
	defer p.prompt.mu.Unlock()
	if p.prompt.first == nil {
		p.prompt.first = make(chan struct{})
	}
	return p.prompt.first
}

// firstPromptWait bounds how long a new shell's first caller waits for its
// first prompt to be sampled.
const firstPromptWait = time.Second

// awaitFirstPrompt lets the learner of the first prompt sample it before
// the caller types anything.
func (p *proc) awaitFirstPrompt() {
	if !p.bash || nrPselect6 < 0 {
		return
	}
	t := time.NewTimer(firstPromptWait)
	defer t.Stop()
	select {
	case <-p.firstLearned():
	case <-p.done:
	case <-t.C:
	}
}

// learnIdle samples the shell while no command runs and nothing is being
// typed (awaitIdleShell, before a command is typed): idle, it sleeps at its
// prompt. It costs a few reads of /proc, and only until a prompt is known.
//
// While no prompt is known it waits for the shell to get there, up to
// idleLearnWait: on a loaded machine the learners of the first prompt and
// of proven ends can all miss it, and a shell whose prompt is unknown can
// never have a lost end recovered (after `exec 251>&-` no proven end comes
// again to learn from). It costs nothing once a prompt is known.
func (p *proc) learnIdle() {
	if !p.bash || nrPselect6 < 0 || p.knowsPrompt() {
		return
	}
	deadline := time.Now().Add(idleLearnWait)
	step := learnStep
	for {
		if sp, ok := p.promptSP(); ok {
			p.addPromptSP(sp)
			return
		}
		if isClosed(p.done) || time.Now().After(deadline) {
			return
		}
		time.Sleep(step)
		step = min(2*step, learnMax)
	}
}

// idleLearnWait bounds how long a command waits, once per shell process,
// for an idle shell to fall asleep at its prompt so that its prompt is
// known.
const idleLearnWait = time.Second

func (p *proc) addPromptSP(sp uint64) {
	p.prompt.mu.Lock()
	defer p.prompt.mu.Unlock()
	p.prompt.learns++
	for _, v := range p.prompt.sps {
		if v == sp {
			return
		}
	}
	if len(p.prompt.sps) < maxPromptSPs {
		p.prompt.sps = append(p.prompt.sps, sp)
	}
}

// shellSyscall reads what pid sleeps in: the syscall number and the
// user-space stack pointer; ok is false when it is not asleep in a
// system call (running, stopped, gone).
func shellSyscall(pid int) (nr int64, sp uint64, ok bool) {
	st, found := readStat(pid)
	if !found || st.state != 'S' {
		return 0, 0, false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/syscall")
	if err != nil {
		return 0, 0, false
	}
	// "nr arg1 ... arg6 sp pc"; "running" or "-1 sp pc" otherwise.
	f := strings.Fields(string(b))
	if len(f) != 9 {
		return 0, 0, false
	}
	nr, err = strconv.ParseInt(f[0], 10, 64)
	if err != nil || nr < 0 {
		return 0, 0, false
	}
	sp, err = strconv.ParseUint(strings.TrimPrefix(f[7], "0x"), 16, 64)
	if err != nil {
		return 0, 0, false
	}
	return nr, sp, true
}

// promptSP reports the sp of the shell asleep in pselect6 on its
// terminal, in the foreground: what a shell at a prompt looks like.
func (p *proc) promptSP() (uint64, bool) {
	if !p.bash || nrPselect6 < 0 || p.foreground() != p.pid {
		return 0, false
	}
	nr, sp, ok := shellSyscall(p.pid)
	if !ok || nr != nrPselect6 {
		return 0, false
	}
	// The descriptors it waits on include the terminal.
	if !p.sleepsOnTerminal(p.pid, true) {
		return 0, false
	}
	return sp, true
}

// atPrompt reports whether the shell itself is at its top-level prompt:
// in the foreground, asleep in pselect6 on the terminal, with an sp
// learned at its prompt.
func (p *proc) atPrompt() bool {
	sp, ok := p.promptSP()
	if !ok {
		return false
	}
	p.prompt.mu.Lock()
	defer p.prompt.mu.Unlock()
	for _, v := range p.prompt.sps {
		if v == sp {
			return true
		}
	}
	return false
}

// readlineInCommand reports, from the shell's /proc/PID/syscall fields
// (asleep in select), whether it is readline called by a command (`read
// -e`) rather than at the prompt: its sp is not a learned prompt's, and
// it still runs the image it started with (a shell that replaced it, exec
// bash, has prompts of its own: replaced.go).
func (p *proc) readlineInCommand(f []string) bool {
	if len(f) != 9 || nrPselect6 < 0 || f[0] != strconv.Itoa(nrPselect6) {
		return false
	}
	// p.image is written once, before ready is closed.
	if !isClosed(p.ready) || p.image == "" || imageOf(p.pid) != p.image {
		return false
	}
	sp, err := strconv.ParseUint(strings.TrimPrefix(f[7], "0x"), 16, 64)
	if err != nil {
		return false
	}
	p.prompt.mu.Lock()
	defer p.prompt.mu.Unlock()
	if len(p.prompt.sps) == 0 {
		return false
	}
	for _, v := range p.prompt.sps {
		if v == sp {
			return false
		}
	}
	return true
}

// knowsPrompt reports whether an sp was learned for this shell.
func (p *proc) knowsPrompt() bool {
	p.prompt.mu.Lock()
	defer p.prompt.mu.Unlock()
	return len(p.prompt.sps) > 0
}

// learnPromptSoon samples the shell once it sleeps at the prompt it is
// printing now (it just proved an end, or showed its first prompt), off
// the read loop, unless enough samples were taken. typed is how many
// writes to the terminal were made at the moment of the end: a sample is
// taken only while nothing more has been typed, so it is the prompt's.
func (p *proc) learnPromptSoon(typed int64) {
	if !p.bash || nrPselect6 < 0 {
		return
	}
	p.prompt.mu.Lock()
	// Once a prompt is known, a few more learners at most: commands
	// typed back to back leave them no quiet prompt to sample.
	if p.prompt.running || p.prompt.learns >= promptLearns || (len(p.prompt.sps) > 0 && p.prompt.tries >= promptLearns) {
		p.prompt.mu.Unlock()
		return
	}
	if len(p.prompt.sps) > 0 {
		p.prompt.tries++
	}
	p.prompt.running = true
	p.prompt.mu.Unlock()
	go p.learnPrompt(typed)
}

// A learner waits for the shell to sleep at its prompt in steps from
// learnStep up to learnMax, learnRounds of them (about 80 ms).
const (
	learnStep   = 500 * time.Microsecond
	learnMax    = 10 * time.Millisecond
	learnRounds = 14
)

func (p *proc) learnPrompt(typed int64) {
	first := p.firstLearned()
	defer func() {
		p.prompt.mu.Lock()
		p.prompt.running = false
		p.prompt.mu.Unlock()
		p.prompt.firstOnce.Do(func() { close(first) })
	}()
	step := learnStep
	for range learnRounds {
		if p.typed.Load() != typed || isClosed(p.done) {
			return
		}
		sp, ok := p.promptSP()
		// Only what was sampled before anything more was typed is the
		// prompt's.
		if ok && p.typed.Load() == typed {
			p.addPromptSP(sp)
			return
		}
		time.Sleep(step)
		step = min(2*step, learnMax)
	}
}
