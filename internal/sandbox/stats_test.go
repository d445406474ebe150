package sandbox

import (
	"os"
	"os/exec"
	"testing"
)

// TestTreeStats: the test process and a child it started are counted,
// with memory and CPU time.
func TestTreeStats(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep binary:", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	st, err := TreeStats(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.Pids < 2 || st.MemoryBytes == 0 || st.CPUNanos == 0 || st.Time.IsZero() {
		t.Errorf("TreeStats of the test and its child: %+v", st)
	}
	if _, err := TreeStats(1 << 30); err == nil {
		t.Error("TreeStats of no process: no error")
	}
}
