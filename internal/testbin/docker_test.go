package testbin

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestNoDockerFailsWhenRequired runs a Docker test's missing-engine path
// in a child test process, with and without RequireDockerEnv: without it
// the test skips, with it the test fails.
func TestNoDockerFailsWhenRequired(t *testing.T) {
	if os.Getenv("LIMBS_TESTBIN_CHILD") == "1" {
		NoDocker(t, "no Docker engine (the child's engine is missing on purpose)")
		return
	}
	for _, tc := range []struct {
		require  string
		wantFail bool
		wantText string
	}{
		{"", false, "docker tests skipped"},
		{"1", true, "requires them"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestNoDockerFailsWhenRequired$", "-test.v")
		cmd.Env = append(os.Environ(), "LIMBS_TESTBIN_CHILD=1", RequireDockerEnv+"="+tc.require)
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != tc.wantFail {
			t.Errorf("%s=%q: failed = %v, want %v; output:\n%s", RequireDockerEnv, tc.require, failed, tc.wantFail, out)
		}
		if !strings.Contains(string(out), tc.wantText) {
			t.Errorf("%s=%q: output lacks %q:\n%s", RequireDockerEnv, tc.require, tc.wantText, out)
		}
	}
}
