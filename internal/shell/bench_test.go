package shell

import (
	"context"
	"testing"

	"github.com/limbs-dev/limbs/internal/wire"
)

// BenchmarkExecTrue is the in-process cost of one trivial command: typing,
// the shell's work, the markers, the result.
func BenchmarkExecTrue(b *testing.B) {
	m, err := NewManager(context.Background(), Options{StateDir: b.TempDir(), Workdir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	s, err := m.Create(context.Background(), wire.CreateSession{})
	if err != nil {
		b.Fatal(err)
	}
	zero := 0.0
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		r, err := s.Exec(ctx, wire.Exec{Command: "true", YieldAfter: &zero})
		if err != nil || *r.ExitCode != 0 {
			b.Fatal(r, err)
		}
	}
}
