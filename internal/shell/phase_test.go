package shell

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
)

func TestPhases(t *testing.T) {
	m, _ := NewManager(context.Background(), Options{StateDir: t.TempDir(), Workdir: t.TempDir()})
	defer m.Close()
	s, _ := m.Create(context.Background(), wire.CreateSession{})
	zero := 0.0
	var a, b2, c2, tot []time.Duration
	for range 300 {
		t0 := time.Now()
		r, _ := s.Exec(context.Background(), wire.Exec{Command: "true", YieldAfter: &zero})
		t1 := time.Now()
		s.mu.Lock()
		c := s.last
		s.mu.Unlock()
		_ = r
		a = append(a, c.startAt.Sub(c.typedAt))
		b2 = append(b2, c.endAt.Sub(c.startAt))
		c2 = append(c2, t1.Sub(c.endAt))
		tot = append(tot, t1.Sub(t0))
	}
	med := func(d []time.Duration) time.Duration {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[len(d)/2]
	}
	t.Logf("typed->start %v start->end %v end->return %v total %v", med(a), med(b2), med(c2), med(tot))
}
