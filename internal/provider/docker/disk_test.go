package docker

import (
	"slices"
	"testing"
)

// The disk bounds of a spec reach limbsd on its command line.
func TestCreateOptionsDiskBounds(t *testing.T) {
	s := withDefaults(testSpec())
	if c := (Options{}).createOptions(s, true); slices.Contains(c.Config.Cmd, "--max-disk") {
		t.Errorf("no bounds asked, yet limbsd gets %q", c.Config.Cmd)
	}
	s.MaxDiskMB, s.MaxSessionDiskMB = 300, 20
	cmd := (Options{}).createOptions(s, true).Config.Cmd
	for _, want := range [][2]string{{"--max-disk", "300MiB"}, {"--max-session-disk", "20MiB"}} {
		i := slices.Index(cmd, want[0])
		if i < 0 || i+1 >= len(cmd) || cmd[i+1] != want[1] {
			t.Errorf("limbsd's command line %q lacks %s %s", cmd, want[0], want[1])
		}
	}
}
