package control_test

import (
	"context"
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/wire"
)

// TestSecretWrappedOnScreen: a secret printed near the right edge wraps
// onto the next row of the screen (a long API key in `cat .env` on an 80
// column terminal), so each of the screen's lines holds only a part of
// it, which the byte masker cannot see. The screen through limbs serve
// must not hold it.
func TestSecretWrappedOnScreen(t *testing.T) {
	const sec = "tr0ub4dor-S3CRET-x9"
	dir := stateDir(t)
	removeAll(t, dir)
	addr := freeAddr(t)
	startServe(t, addr, "--state-dir", dir, "--provider", "local", "--isolation", "none")
	ctl, _ := recordingClient(t, addr, "")
	ctx := context.Background()
	sbs := ctl.Sandboxes()
	sb, err := sbs.Create(ctx, wire.CreateSandbox{Name: "wrap", Env: map[string]string{"API_KEY": sec}, SecretEnv: []string{"API_KEY"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sbs.Remove(context.Background(), sb.ID) })
	c, _ := recordingClient(t, addr, "/sandboxes/wrap")
	if _, err := c.CreateSession(ctx, wire.CreateSession{Name: "main", Cols: 40, Rows: 10}); err != nil {
		t.Fatal(err)
	}
	yield := 10.0
	if _, err := c.Exec(ctx, "main", wire.Exec{Command: `clear; printf '%*s%s\n' 30 '' "$API_KEY"; echo; echo "#$API_KEY"`, YieldAfter: &yield}); err != nil {
		t.Fatal(err)
	}
	sc, err := c.Screen(ctx, "main")
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(sc.Lines, "")
	if strings.Contains(joined, sec) || strings.Contains(joined, sec[:10]) {
		t.Errorf("the screen holds the secret (or its start) across its lines:\n%s", strings.Join(sc.Lines, "\n"))
	}
	if !strings.Contains(joined, "#***") {
		t.Errorf("the screen does not show the unwrapped secret masked:\n%s", strings.Join(sc.Lines, "\n"))
	}
}
