package load

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Kinds of faults.
const (
	FaultLimbsdKill       = "limbsd_kill"       // SIGKILL to a sandbox's limbsd
	FaultContainerRestart = "container_restart" // docker restart of a sandbox's container
	FaultOOM              = "oom"               // a memory hog meets the sandbox's memory limit
	FaultServeKill        = "serve_kill"        // kill -9 of limbs serve, then a restart
	FaultDisconnect       = "disconnect"        // a client hangs up mid-command
)

// FaultKinds are the kinds a provider has (the container ones are
// Docker's).
func FaultKinds(provider string) []string {
	if provider == "local" {
		return []string{FaultLimbsdKill, FaultServeKill, FaultDisconnect}
	}
	return []string{FaultLimbsdKill, FaultContainerRestart, FaultOOM, FaultServeKill, FaultDisconnect}
}

// Fault is one injected fault and what was seen of it.
type Fault struct {
	At      float64 `json:"at_s"` // since the run's start
	Kind    string  `json:"kind"`
	Target  string  `json:"target"`
	Err     string  `json:"error,omitempty"` // injecting it failed
	Seen    string  `json:"seen,omitempty"`  // what limbs made of it
	Settled float64 `json:"settled_s"`       // until every sandbox ran again
	OK      bool    `json:"ok"`              // it happened and limbs said so
	since   time.Time
}

// inject injects faults at random moments (seeded) until stop: first
// one of each kind in a random order (firstRound is closed after it),
// then kinds at random. After each it waits for every sandbox to run
// again, so that each fault meets a working system.
func (r *run) inject(ctx context.Context, stop <-chan struct{}, firstRound chan<- struct{}) {
	kinds := r.opts.FaultKinds
	if len(kinds) == 0 {
		kinds = FaultKinds(r.opts.Provider)
	}
	rng := mrand.New(mrand.NewPCG(uint64(r.opts.Seed), 0xfa017))
	order := rng.Perm(len(kinds))
	closed := false
	defer func() {
		if !closed {
			close(firstRound)
		}
	}()
	gap := r.opts.FaultGap
	for n := 0; n < 10_000; n++ {
		if n == len(kinds) && !closed {
			close(firstRound)
			closed = true
		}
		wait := gap/2 + time.Duration(rng.Int64N(int64(gap)))
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if closed {
			// After the first round, stop at the load's end.
			select {
			case <-stop:
				return
			default:
			}
		}
		kind := kinds[rng.IntN(len(kinds))]
		if n < len(kinds) {
			kind = kinds[order[n]]
		}
		f := r.fault(ctx, rng, kind)
		r.logf("fault %s on %s%s", f.Kind, f.Target, map[bool]string{true: ": " + f.Err, false: ""}[f.Err != ""])
		if r.opts.Overlap {
			r.mu.Lock()
			r.faults = append(r.faults, f)
			r.mu.Unlock()
			continue
		}
		if f.Err == "" && (f.Kind == FaultLimbsdKill || f.Kind == FaultContainerRestart) {
			// Bounded by limbs' own retries: a start that times out (2
			// minutes, on an engine that crawls) is tried again.
			if err := r.waitRecovered(ctx, f.Target, f.since, 5*time.Minute); err != nil {
				f.Err = err.Error()
			}
		}
		if err := r.waitRunning(ctx, 5*time.Minute); err != nil {
			f.Err = strings.TrimPrefix(f.Err+"; ", "; ") + "not every sandbox ran again within 5 minutes: " + err.Error()
		}
		f.Settled = time.Since(f.since).Seconds()
		r.mu.Lock()
		r.faults = append(r.faults, f)
		r.mu.Unlock()
	}
}

func (r *run) fault(ctx context.Context, rng *mrand.Rand, kind string) Fault {
	id := r.ids[rng.IntN(len(r.ids))]
	f := Fault{At: time.Since(r.started).Seconds(), Kind: kind, Target: id, since: time.Now()}
	var err error
	switch kind {
	case FaultLimbsdKill:
		err = r.killLimbsd(ctx, id)
	case FaultContainerRestart:
		_, err = dockerCmd(ctx, "restart", "-t", "2", containerName(id))
	case FaultOOM:
		f.Seen, err = r.hog(ctx, id)
	case FaultServeKill:
		f.Target = "limbs serve (pid " + strconv.Itoa(r.sv.pid()) + ")"
		r.sv.kill()
		err = r.sv.start(ctx)
	case FaultDisconnect:
		i := rng.IntN(r.opts.Clients)
		f.Target = "client " + strconv.Itoa(i)
		r.cut[i].Store(true)
	default:
		err = fmt.Errorf("unknown fault %q; the kinds are %s", kind, strings.Join(FaultKinds(r.opts.Provider), ", "))
	}
	if err != nil {
		f.Err = err.Error()
	}
	return f
}

// waitRecovered waits until the sandbox's event log has its death and
// its recovery since a moment.
func (r *run) waitRecovered(ctx context.Context, id string, since time.Time, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		list, err := r.ctl.Events(ctx, id, client.EventsQuery{Types: "sandbox.*"})
		died, recovered := false, false
		for _, ev := range list.Events {
			if ev.Time.Before(since.Add(-time.Second)) {
				continue
			}
			died = died || ev.Type == wire.EventSandboxDied
			recovered = recovered || (died && ev.Type == wire.EventSandboxRecovered)
		}
		if recovered {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("sandbox %s: no death and recovery in its event log within %s (died: %v, last error: %v)", id, within, died, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// killLimbsd sends SIGKILL to the limbsd of sandbox id: for Docker the
// child of the container's init (the host PID the engine reports), for
// the local provider the limbsd under this run's serve whose command
// line names the sandbox.
func (r *run) killLimbsd(ctx context.Context, id string) error {
	pid := 0
	if r.opts.Provider == "local" {
		for _, p := range descendants(r.sv.pid()) {
			if comm(p) != "limbsd" {
				continue
			}
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
			if strings.Contains(string(b), id) {
				pid = p
				break
			}
		}
	} else {
		pid = limbsdOf(containerPIDs(ctx, []string{id})[id])
	}
	if pid == 0 {
		return fmt.Errorf("no limbsd found for sandbox %s", id)
	}
	return syscall.Kill(pid, syscall.SIGKILL)
}

// hog runs a memory hog in the sandbox's hog session: the kernel's OOM
// killer must end it (exit 137) and serve must record sandbox.oom.
func (r *run) hog(ctx context.Context, id string) (string, error) {
	c := r.sv.client("/sandboxes/" + id)
	defer c.HTTPClient().CloseIdleConnections()
	hctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	// tail keeps the line it reads until its end, and /dev/zero has no
	// newline: it grows until the memory limit's OOM killer ends it.
	cmd := `head -c 8G /dev/zero | tail >/dev/null; echo "exit $?"`
	res, err := c.Exec(hctx, "hog", wire.Exec{Command: cmd, Timeout: 60})
	for i := 0; i < 20 && err == nil && res.Status == wire.StatusRunning; i++ {
		yield := 10.0
		res, err = c.Wait(hctx, "hog", wire.Wait{YieldAfter: &yield})
	}
	if err != nil {
		if errors.Is(err, wire.ErrNotFound) {
			_, _ = c.CreateSession(ctx, wire.CreateSession{Name: "hog"})
		}
		return "", fmt.Errorf("the memory hog: %w", err)
	}
	if !strings.Contains(res.Output, "exit 137") {
		return "", fmt.Errorf("the memory hog was not killed by the OOM killer: %q", res.Output)
	}
	return "the hog exited 137 (SIGKILL)", nil
}

// checkFaults says, for each fault, what serve made of it: a death and a
// recovery in the sandbox's event log after a kill or a restart, an OOM
// event after the hog, a healthy serve after its restart, and the client
// that hung up following its command to its end.
func (r *run) checkFaults(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	evs := map[string][]wire.Event{}
	events := func(id string) []wire.Event {
		if l, ok := evs[id]; ok {
			return l
		}
		list, _ := r.ctl.Events(ctx, id, client.EventsQuery{Types: "sandbox.*"})
		evs[id] = list.Events
		return list.Events
	}
	for i := range r.faults {
		f := &r.faults[i]
		if f.Err != "" {
			continue
		}
		has := func(types ...wire.EventType) string {
			var seen []string
			for _, ev := range events(f.Target) {
				if ev.Time.After(f.since.Add(-time.Second)) && slices.Contains(types, ev.Type) && !slices.Contains(seen, string(ev.Type)) {
					seen = append(seen, string(ev.Type))
				}
			}
			return strings.Join(seen, ", ")
		}
		switch f.Kind {
		case FaultLimbsdKill, FaultContainerRestart:
			seen := has(wire.EventSandboxDied, wire.EventSandboxRecovered)
			f.Seen = "event log: " + seen
			f.OK = strings.Contains(seen, string(wire.EventSandboxDied)) && strings.Contains(seen, string(wire.EventSandboxRecovered))
		case FaultOOM:
			seen := has(wire.EventSandboxOOM)
			f.Seen += "; event log: " + seen
			f.OK = seen != ""
		case FaultServeKill:
			f.Seen, f.OK = "restarted; every sandbox ran again", true
		case FaultDisconnect:
			n, _ := strconv.Atoi(strings.TrimPrefix(f.Target, "client "))
			for _, rec := range r.records {
				if rec.client == n && rec.kind == KindDisconnect && !rec.start.Before(f.since) {
					f.Seen, f.OK = "its command: "+rec.outcome+" "+rec.resumed+rec.reason, rec.outcome == OutcomeOK
					break
				}
			}
			if f.Seen == "" {
				f.Seen = "the client started no command after it"
			}
		}
	}
}
