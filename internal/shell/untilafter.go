package shell

import (
	"context"
	"syscall"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
)

// afterEndMax bounds how long a call without a yield waits, after its
// command ended, for a port a background process is to open.
const afterEndMax = 30 * time.Second

// portAfterEnd is until.port outliving its command: `python3 -m
// http.server 8000 &` ends at once, and what the caller waits for is the
// port the process it left running is to open. When the command left
// background processes (r.Background) and asked for a port that did not
// hold, the call samples the port every untilTick until it listens (then
// r.Matched is port on the ended result), every listed background process
// is gone, the call's deadline passes (its yield; afterEndMax without
// one), or the caller leaves. Only the port waits so: output and screen
// belong to the command, which has ended.
func (s *Session) portAfterEnd(ctx context.Context, r *wire.Result, sp *untilSpec, deadline time.Time) {
	if sp == nil || sp.port <= 0 || r.BackgroundCount == 0 || r.Matched != "" {
		return
	}
	t := time.NewTicker(untilTick)
	defer t.Stop()
	for range int(afterEndMax/untilTick) + 1 {
		if addr, ok := s.listening(sp.port); ok {
			r.Matched, r.MatchedText = wire.MatchedPort, addr
			return
		}
		if !anyAlive(r.Background) || !time.Now().Before(deadline) {
			return
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// anyAlive reports whether one of ps still runs (not a zombie).
func anyAlive(ps []wire.BackgroundProcess) bool {
	for _, p := range ps {
		if p.PID <= 0 || syscall.Kill(p.PID, 0) != nil {
			continue
		}
		if st, ok := readStat(p.PID); ok && st.state != 'Z' && st.state != 'X' {
			return true
		}
	}
	return false
}
