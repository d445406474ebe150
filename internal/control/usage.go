package control

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/wire"
)

// StatsProvider is implemented by providers that can measure a running
// sandbox's resource use (docker: the engine's one-shot stats; local:
// /proc). It is optional: the sandboxes of a provider without it report
// no usage.
type StatsProvider interface {
	Stats(ctx context.Context, id string) (sandbox.Stats, error)
}

// Usage is one running sandbox's resource use (GET /v1/stats, an
// extension): CPU as a share of one CPU over the time since the previous
// sample (absent on the first), memory and processes now.
type Usage struct {
	Sandbox          string    `json:"sandbox"`
	Time             time.Time `json:"time"`
	CPUPercent       *float64  `json:"cpu_percent,omitempty"`
	CPUSeconds       float64   `json:"cpu_seconds"`
	MemoryBytes      uint64    `json:"memory_bytes"`
	MemoryLimitBytes uint64    `json:"memory_limit_bytes,omitempty"`
	Pids             uint64    `json:"pids"`
}

// UsageList is the answer of GET /v1/stats.
type UsageList struct {
	Stats []Usage `json:"stats"`
}

// Bounds of a usage sweep: samples taken at once, the time one may take,
// and how long a sweep's answer is reused (so that any number of
// dashboards cost one sweep every usageTTL).
const (
	usageWorkers = 8
	usageTimeout = 3 * time.Second
	usageTTL     = 2 * time.Second
)

type usageCache struct {
	mu   sync.Mutex // held during a sweep: callers meanwhile wait for it
	at   time.Time
	list []Usage
	prev map[string]sandbox.Stats
}

func (s *Plane) usage() *usageCache { return &s.usageCache }

// ResourceUsage samples every running sandbox whose provider measures
// (StatsProvider), usageWorkers at a time, each within usageTimeout; a
// sandbox that fails to answer is left out. Sweeps less than usageTTL
// apart return the same list.
func (s *Plane) ResourceUsage(ctx context.Context) []Usage {
	c := s.usage()
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) < usageTTL && c.list != nil {
		return c.list
	}
	type job struct {
		id string
		sp StatsProvider
	}
	var jobs []job
	s.mu.Lock()
	for _, e := range s.sandboxes {
		if e.rec.Pool != "" || e.rec.Status != wire.SandboxRunning {
			continue
		}
		p, ok := s.opts.Providers[e.rec.Provider]
		if !ok {
			continue
		}
		if sp, ok := p.(StatsProvider); ok {
			jobs = append(jobs, job{e.rec.ID, sp})
		}
	}
	s.mu.Unlock()
	ok := make([]bool, len(jobs))
	samples := make([]sandbox.Stats, len(jobs))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(usageWorkers, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				sctx, cancel := context.WithTimeout(ctx, usageTimeout)
				st, err := jobs[i].sp.Stats(sctx, jobs[i].id)
				cancel()
				if err == nil {
					samples[i], ok[i] = st, true
				}
			}
		}()
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	prev := c.prev
	c.prev = make(map[string]sandbox.Stats, len(jobs))
	list := make([]Usage, 0, len(jobs))
	for i, j := range jobs {
		if !ok[i] {
			continue
		}
		st := samples[i]
		if st.Time.IsZero() {
			st.Time = time.Now()
		}
		c.prev[j.id] = st
		u := Usage{Sandbox: j.id, Time: st.Time, CPUSeconds: float64(st.CPUNanos) / 1e9,
			MemoryBytes: st.MemoryBytes, MemoryLimitBytes: st.MemoryLimitBytes, Pids: st.Pids}
		if p, had := prev[j.id]; had && st.Time.After(p.Time) && st.CPUNanos >= p.CPUNanos {
			pct := float64(st.CPUNanos-p.CPUNanos) / float64(st.Time.Sub(p.Time)) * 100
			u.CPUPercent = &pct
		}
		list = append(list, u)
	}
	c.list, c.at = list, time.Now()
	return list
}

func (s *Server) handleUsage(w http.ResponseWriter, r *http.Request) {
	wire.WriteJSON(w, http.StatusOK, UsageList{Stats: s.ResourceUsage(r.Context())})
}
