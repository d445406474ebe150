package docker

import (
	"strings"
	"testing"
)

// TestAgentCannotTakeFilesWorker: the file API's worker runs as the agent,
// but the agent cannot trace it, take its descriptors (the control socket
// over which limbsd passes every file API connection, its standard error,
// which is limbsd's log) or read its memory and environment; it can only
// kill it, and the next request starts another.
func TestAgentCannotTakeFilesWorker(t *testing.T) {
	p := newProvider(t)
	b := newBox(t, p, nil)
	if _, err := b.lc.WriteFile(t.Context(), "/workspace/start", strings.NewReader("x"), 0o644, ""); err != nil {
		t.Fatal(err)
	}
	worker := `W=$(pgrep -u 1000 -x limbsd | head -1); test -n "$W" || exit 9; `
	getfd := func(fd string) string {
		return worker + `python3 -c 'import os,ctypes,sys; l=ctypes.CDLL(None); p=os.pidfd_open(int(sys.argv[1])); sys.exit(0 if l.syscall(438, p, ` + fd + `, 0) >= 0 else 1)' "$W"`
	}
	refused := []struct{ name, command string }{
		{"take its control socket", getfd("3")},
		{"take its standard error", getfd("2")},
		{"read its environ", worker + `cat /proc/$W/environ`},
		{"read its memory", worker + `head -c 16 /proc/$W/mem`},
		{"trace it", worker + `python3 -c 'import ctypes,sys; l=ctypes.CDLL(None); sys.exit(0 if l.ptrace(16, int(sys.argv[1]), 0, 0) == 0 else 1)' "$W"`},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			r := b.run(t, tc.command, 30)
			if c := exitCode(r); c == 0 || c == 9 {
				t.Errorf("%q as the agent: exit %d (%q), want it refused", tc.command, c, r.Output)
			}
		})
	}
}
