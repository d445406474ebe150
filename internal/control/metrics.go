package control

import (
	"github.com/limbs-dev/limbs/internal/wire"
)

// Stats is the state of a Plane at one moment, for metrics.
type Stats struct {
	// Sandboxes counts the sandboxes clients hold, by status; warm pool
	// ones not yet claimed are in Pool* only.
	Sandboxes map[string]int
	// PoolReady counts the pool's sandboxes ready to be claimed, and
	// PoolWant the number asked for, by image.
	PoolReady map[string]int
	PoolWant  map[string]int
}

// Stats reports the sandboxes by status and the warm pool.
func (s *Plane) Stats() Stats {
	st := Stats{Sandboxes: map[string]int{}, PoolReady: map[string]int{}, PoolWant: map[string]int{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.sandboxes {
		switch {
		case e.rec.Pool == "":
			st.Sandboxes[e.rec.Status]++
		case e.rec.Status == wire.SandboxRunning && !e.unprimed:
			st.PoolReady[e.rec.Pool]++
		}
	}
	for image, n := range s.pool.want {
		st.PoolWant[image] = n
	}
	return st
}
