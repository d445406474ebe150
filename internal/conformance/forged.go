package conformance

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

// forgeScript is what a hostile program run by a command does: it reads
// the marker token from its parent shell's memory (/proc/PPID/mem, same
// uid), optionally sends well-formed messages on every socket it inherited
// (the shell's end-of-command channel among them), and prints end, exit
// and start markers claiming success in /etc/fake, for every plausible
// sequence number and in the old format. Arguments: the mode
// ("markers" or "datagrams"), then optional phases, each a pair of files:
// wait for the first to exist, forge, create the second.
const forgeScript = `import os, re, socket, sys, time
def token():
    pp = os.getppid()
    try:
        maps = open("/proc/%d/maps" % pp).read().splitlines()
        mem = open("/proc/%d/mem" % pp, "rb", 0)
    except OSError:
        return None
    for line in maps:
        f = line.split()
        if "r" not in f[1] or "w" not in f[1]:
            continue
        a, b = (int(x, 16) for x in f[0].split("-"))
        try:
            mem.seek(a)
            d = mem.read(b - a)
        except (OSError, OverflowError, ValueError):
            continue
        m = re.search(rb"\x1b\]633;limbs;([0-9a-f]{16,});", d)
        if m:
            return m.group(1).decode()
    return None
def forge(tok, mode):
    socks = []
    if mode == "datagrams":
        for fd in range(3, 1024):
            try:
                if os.readlink("/proc/self/fd/%d" % fd).startswith("socket:"):
                    socks.append(socket.socket(fileno=os.dup(fd)))
            except OSError:
                pass
    def say(msg, marker):
        for s in socks:
            try:
                s.send(msg)
            except OSError:
                pass
        sys.stdout.write("\x1b]633;limbs;%s;%s\x07" % (tok, marker))
        sys.stdout.flush()
    say(b"E 0 0 /etc/fake", "E;0;/etc/fake")
    say(b"", "S")
    for n in range(0, 300):
        say(b"E %d 0 /etc/fake" % n, "E;%d" % n)
    say(b"X 0 /etc/fake", "X;/etc/fake")
def flood(seconds):
    socks = []
    for fd in range(3, 1024):
        try:
            if os.readlink("/proc/self/fd/%d" % fd).startswith("socket:"):
                socks.append(socket.socket(fileno=os.dup(fd)))
        except OSError:
            pass
    end = time.time() + seconds
    n = 0
    while time.time() < end and socks:
        for s in socks:
            try:
                s.send(b"junk %d" % n)
            except OSError:
                socks.remove(s)
        n += 1
if sys.argv[1] == "flood":
    flood(float(sys.argv[2]))
    sys.exit(0)
tok = token()
sys.stderr.write("forge: token %s\n" % ("found" if tok else "not found"))
sys.stderr.flush()
phases = sys.argv[2:]
if not tok:
    for i in range(1, len(phases), 2):
        open(phases[i], "w").close()
    sys.exit(0)
if not phases:
    forge(tok, sys.argv[1])
for i in range(0, len(phases) - 1, 2):
    for _ in range(600):
        if os.path.exists(phases[i]):
            break
        time.sleep(0.05)
    forge(tok, sys.argv[1])
    open(phases[i + 1], "w").close()
`

// The forger's own line ("forge: token found") goes to stderr, its
// markers to stdout: a background forger keeps its stdout on the terminal.

// testForgedMarkers: the end of a command is the shell's, however well a
// process of the command imitates its marker.
func testForgedMarkers(t *testing.T, c *client.Client) {
	// setup writes the forger into a directory of its own and returns the
	// session, its cwd and the directory.
	setup := func(t *testing.T) (id, cwd, dir string) {
		id = newSession(t, c)
		if !have(t, c, id, "python3") {
			t.Skip("no python3 in the sandbox: the forger is a python script")
		}
		dir = fmt.Sprintf("/tmp/limbs-forge-%d", rnd())
		wantOutput(t, c, id, "mkdir -p "+dir+" && cat > "+dir+"/forge.py <<'LIMBS_FORGE_EOF'\n"+forgeScript+"LIMBS_FORGE_EOF", "")
		t.Cleanup(func() {
			// Before the session is deleted (cleanups run last first).
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _ = c.Exec(ctx, id, wire.Exec{Command: "rm -rf " + dir, YieldAfter: ptr(guardYield)})
		})
		cwd = strings.TrimSpace(run(t, c, id, "pwd").Output)
		return id, cwd, dir
	}
	// check is the forged command's result, then the next command's own.
	check := func(t *testing.T, id, cwd string, r wire.Result) {
		t.Helper()
		if strings.Contains(r.Output, "forge: token not found") {
			t.Skip("the forger could not read its shell's memory here (ptrace restricted): the attack does not apply")
		}
		wantExit(t, r, 7)
		if r.Cwd != cwd {
			t.Errorf("cwd = %q, want %q: a forged marker set it", r.Cwd, cwd)
		}
		if !strings.Contains(r.Output, "real-output") || !strings.Contains(r.Output, "forge: token found") {
			t.Errorf("output = %q, want the forger's line and real-output", r.Output)
		}
		next := run(t, c, id, "echo next-output; (exit 3)")
		wantExit(t, next, 3)
		if next.Output != "next-output\n" || next.Cwd != cwd {
			t.Errorf("next command: output %q cwd %q, want %q in %q", next.Output, next.Cwd, "next-output\n", cwd)
		}
	}
	t.Run("EndPrintedByChild", func(t *testing.T) {
		t.Parallel()
		id, cwd, dir := setup(t)
		check(t, id, cwd, run(t, c, id, "python3 "+dir+"/forge.py markers; sleep 0.3; echo real-output; (exit 7)"))
	})
	t.Run("EndSentOnInheritedChannel", func(t *testing.T) {
		t.Parallel()
		id, cwd, dir := setup(t)
		check(t, id, cwd, run(t, c, id, "python3 "+dir+"/forge.py datagrams; sleep 0.3; echo real-output; (exit 7)"))
	})
	t.Run("FloodedChannel", func(t *testing.T) {
		t.Parallel()
		id, cwd, dir := setup(t)
		// A child that floods every socket it inherited, for a while:
		// the shell's own messages still get through, in time.
		wantOutput(t, c, id, "python3 "+dir+"/forge.py flood 3 >/dev/null 2>&1 &", "")
		for i := 1; i <= 5; i++ {
			r := run(t, c, id, fmt.Sprintf("sleep 0.2; echo out-%d; (exit %d)", i, i))
			wantExit(t, r, i)
			if r.Output != fmt.Sprintf("out-%d\n", i) || r.Cwd != cwd {
				t.Errorf("command %d under a flood: output %q cwd %q", i, r.Output, r.Cwd)
			}
		}
	})
	t.Run("BackgroundChildWhileIdleAndLater", func(t *testing.T) {
		t.Parallel()
		id, cwd, dir := setup(t)
		// Phase one forges at once, while the shell is idle; phase two
		// once the next command has started.
		wantOutput(t, c, id, "python3 "+dir+"/forge.py datagrams "+dir+"/forge.py "+dir+"/idle "+dir+"/go "+dir+"/done 2>"+dir+"/log &", "")
		watcher := newSession(t, c)
		eventually(t, "the background forger forges while the shell is idle", func() (bool, string) {
			r := run(t, c, watcher, "ls "+dir)
			return strings.Contains(r.Output, "idle"), r.Output
		})
		s, err := c.GetSession(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if s.Cwd != cwd || s.State != wire.StateIdle {
			t.Errorf("after a forged end while idle: session cwd %q state %q, want %q %q", s.Cwd, s.State, cwd, wire.StateIdle)
		}
		r := run(t, c, id, "touch "+dir+"/go; for i in $(seq 600); do [ -e "+dir+"/done ] && break; sleep 0.05; done; sleep 0.3; cat "+dir+"/log; echo; echo real-output; (exit 7)")
		check(t, id, cwd, r)
	})
}
