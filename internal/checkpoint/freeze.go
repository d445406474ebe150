package checkpoint

import (
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Freezing: a checkpoint must see the files as of one moment, so every
// process of the sandbox but limbsd's own is stopped (SIGSTOP) for the
// scan and continued after. Parents are stopped before their children and
// continued after them, so that a shell never sees its foreground job stop
// (it would report it "Stopped" and leave it). A process that was stopped
// already is left alone, and stays stopped.
//
// Which processes: where limbsd owns the pid namespace (it is PID 1, or
// PID 1 is limbsd's init: a Docker sandbox) every process in it, since an
// orphaned background server is re-parented to PID 1; elsewhere (the local
// provider) the descendants of limbsd.

// Bounds of a freeze: rounds of listing until no new process shows, and
// the wait for the stopped ones to be seen stopped.
const (
	freezeRounds   = 20
	freezeDeadline = 500 * time.Millisecond
	stopWait       = 200 * time.Millisecond
)

type frozen struct {
	pids  []int // in the order they were stopped
	procs []int // every process of the sandbox seen, stopped already or not
	start time.Time
}

type procInfo struct {
	pid, ppid int
	state     byte
}

func listProcs() map[int]procInfo {
	out := map[int]procInfo{}
	d, err := os.Open("/proc")
	if err != nil {
		return out
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if pi, ok := readStat(pid); ok {
			out[pid] = pi
		}
	}
	return out
}

func readStat(pid int) (procInfo, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+4 > len(s) {
		return procInfo{}, false
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 2 {
		return procInfo{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	return procInfo{pid: pid, ppid: ppid, state: f[0][0]}, true
}

func exeOf(pid int) string {
	p, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	return p
}

// freezer knows which processes are limbsd's own.
type freezer struct {
	self int
	all  bool
	own  map[int]bool
	exe  string
}

func newFreezer() *freezer {
	f := &freezer{self: os.Getpid(), own: map[int]bool{}}
	f.exe = exeOf(f.self)
	f.own[f.self] = true
	if f.self == 1 {
		f.all = true
	} else if os.Getppid() == 1 && f.exe != "" && exeOf(1) == f.exe {
		f.all = true
		f.own[1] = true
	}
	return f
}

// candidates are the processes to stop now: not ours, not stopped or
// dead already, and not seen before.
func (f *freezer) candidates(procs map[int]procInfo, seen map[int]bool) []procInfo {
	var out []procInfo
	for pid, pi := range procs {
		if f.own[pid] || seen[pid] {
			continue
		}
		if pi.ppid == f.self && f.exe != "" && exeOf(pid) == f.exe {
			f.own[pid] = true // a files worker: limbsd's own
			continue
		}
		if !f.all && !descends(procs, pid, f.self) {
			continue
		}
		seen[pid] = true
		switch pi.state {
		case 'T', 't', 'Z', 'X':
			continue // stopped by someone else, or dead
		}
		out = append(out, pi)
	}
	depth := func(pid int) int {
		d := 0
		for i := 0; i < 64; i++ {
			pi, ok := procs[pid]
			if !ok || pi.ppid == 0 {
				break
			}
			pid = pi.ppid
			d++
		}
		return d
	}
	sort.Slice(out, func(i, j int) bool { return depth(out[i].pid) < depth(out[j].pid) })
	return out
}

func descends(procs map[int]procInfo, pid, anc int) bool {
	for i := 0; i < 64; i++ {
		pi, ok := procs[pid]
		if !ok || pi.ppid == 0 {
			return false
		}
		if pi.ppid == anc {
			return true
		}
		pid = pi.ppid
	}
	return false
}

// freeze stops the sandbox's processes, listing them again until no new
// one shows (bounded), and waits (bounded) to see them stopped.
func (f *freezer) freeze() *frozen {
	fz := &frozen{start: time.Now()}
	seen := map[int]bool{}
	deadline := time.Now().Add(freezeDeadline)
	for round := 0; round < freezeRounds && time.Now().Before(deadline); round++ {
		c := f.candidates(listProcs(), seen)
		if len(c) == 0 && round > 0 {
			break
		}
		for _, pi := range c {
			if syscall.Kill(pi.pid, syscall.SIGSTOP) == nil {
				fz.pids = append(fz.pids, pi.pid)
			}
		}
	}
	for pid := range seen {
		fz.procs = append(fz.procs, pid)
	}
	end := time.Now().Add(stopWait)
	for _, pid := range fz.pids {
		for time.Now().Before(end) {
			pi, ok := readStat(pid)
			if !ok || pi.state == 'T' || pi.state == 't' || pi.state == 'Z' || pi.state == 'X' {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	return fz
}

// thaw continues what freeze stopped, children first; it is safe on nil
// and twice.
func (fz *frozen) thaw() time.Duration {
	if fz == nil || fz.pids == nil {
		return 0
	}
	for i := len(fz.pids) - 1; i >= 0; i-- {
		_ = syscall.Kill(fz.pids[i], syscall.SIGCONT)
	}
	fz.pids = nil
	return time.Since(fz.start)
}
