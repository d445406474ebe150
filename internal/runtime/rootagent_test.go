package runtime_test

import (
	"os"
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/wire"
)

// A root limbsd whose agent is root too (--user 0, the name root, any
// name an image maps to uid 0) gives its shells no capability: the
// capabilities a provider gives limbsd are for managing another user's
// processes. Before, a sandbox created with "user": "root" ran every
// command with CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_SYS_PTRACE, ... .
func TestRootAgentHoldsNoCapability(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: limbsd must run as root with capabilities")
	}
	for _, user := range []string{"0", "root", "0:0"} {
		t.Run(user, func(t *testing.T) {
			d := startDaemon(t, "--token", testToken, "--user", user)
			c := d.client(t, testToken)
			s, err := c.CreateSession(t.Context(), wire.CreateSession{})
			if err != nil {
				t.Fatal(err)
			}
			y := 20.0
			r, err := c.Exec(t.Context(), s.ID, wire.Exec{Command: "id -u; grep -E '^(CapPrm|CapEff|CapAmb):' /proc/self/status", YieldAfter: &y})
			if err != nil {
				t.Fatal(err)
			}
			want := "0\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapAmb:\t0000000000000000"
			if got := strings.TrimSpace(r.Output); got != want {
				t.Errorf("a root agent's command:\n%s\nwant\n%s", got, want)
			}
		})
	}
}
