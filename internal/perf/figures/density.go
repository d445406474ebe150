package figures

import (
	"context"
	"fmt"
	"time"

	"github.com/limbs-dev/limbs/internal/perf"
	"github.com/limbs-dev/limbs/internal/wire"
)

// settle is how long a process is left idle before its memory is read.
const settle = time.Second

// density: the RSS of a fresh limbsd idle, with one session and per extra
// idle session; the RSS of limbs serve per idle sandbox; and the host
// memory of one idle Docker sandbox with one session (shim, init, limbsd,
// bash: their PSS summed, and the container's memory cgroup).
func (e *env) density(ctx context.Context) error {
	const g = "density"
	e.progress("%s: a fresh limbsd, idle, then with 1 and %d more idle sessions", g, e.o.IdleSessions)
	l, err := perf.StartLimbsd(ctx, e.o.Limbsd)
	if err != nil {
		return err
	}
	defer l.Close()
	if err := perf.Sleep(ctx, settle); err != nil {
		return err
	}
	idle, err := perf.RSS(l.PID)
	if err != nil {
		return err
	}
	session := func(name string) error {
		id, err := l.Session(ctx, name)
		if err != nil {
			return err
		}
		_, err = execRounds(ctx, l.Client, id, "true", "", 0)
		return err
	}
	if err := session("d0"); err != nil {
		return err
	}
	if err := perf.Sleep(ctx, settle); err != nil {
		return err
	}
	one, err := perf.RSS(l.PID)
	if err != nil {
		return err
	}
	for i := range e.o.IdleSessions {
		if err := session(fmt.Sprintf("d%d", i+1)); err != nil {
			return err
		}
	}
	if err := perf.Sleep(ctx, settle); err != nil {
		return err
	}
	more, err := perf.RSS(l.PID)
	if err != nil {
		return err
	}
	var bash []float64
	for _, p := range perf.Tree(l.PID)[1:] {
		if p.Comm == "bash" {
			bash = append(bash, perf.MiB(p.PSS))
		}
	}
	perSession := perf.MiB(more-one) / float64(max(1, e.o.IdleSessions))
	e.rep.Add(perf.Row{Key: "density/limbsd-idle", Group: g, Name: "limbsd RSS, idle, no session", Unit: "MiB", Stats: perf.Once(perf.MiB(idle))})
	e.rep.Add(perf.Row{Key: "density/limbsd-one", Group: g, Name: "limbsd RSS, idle, one session", Unit: "MiB", Stats: perf.Once(perf.MiB(one))})
	e.rep.Add(perf.Row{Key: "density/limbsd-per-session", Group: g, Name: fmt.Sprintf("limbsd RSS per extra idle session (%d more)", e.o.IdleSessions), Unit: "MiB", Stats: perf.Once(perSession)})
	e.rep.Add(perf.Row{Key: "density/bash-per-session", Group: g, Name: "bash PSS per session (each session's own shell)", Unit: "MiB", Stats: perf.Summarize(bash)})
	e.rep.Target("limbsd RSS idle (one session)", "< 12 MiB", perf.Num(perf.MiB(one))+" MiB", perf.MiB(one) < 12)
	e.rep.Target("limbsd RSS per extra idle session", "< 2 MiB", perf.Num(perSession)+" MiB", perSession < 2)
	l.Close()

	if err := e.dockerOK(ctx); err != nil {
		e.rep.Note("density: no Docker figures: %v", err)
		return nil
	}
	n := max(1, e.o.IdleSandboxes)
	e.progress("%s: a fresh limbs serve, then %d idle Docker sandboxes with one session each", g, n)
	s, err := perf.StartServe(ctx, perf.ServeOptions{Limbs: e.o.Limbs, Limbsd: e.o.Limbsd, Provider: "docker"})
	if err != nil {
		return err
	}
	defer s.Close()
	if err := perf.Sleep(ctx, settle); err != nil {
		return err
	}
	serve0, err := perf.RSS(s.PID)
	if err != nil {
		return err
	}
	sbs := make([]*perf.Sandbox, 0, n)
	defer func() { removeAll(context.WithoutCancel(ctx), s, sbs) }()
	for range n {
		_, sb, err := createOnce(ctx, s, wire.CreateSandbox{Image: e.o.Image})
		if sb != nil {
			sbs = append(sbs, sb)
		}
		if err != nil {
			return err
		}
	}
	if err := perf.Sleep(ctx, 2*settle); err != nil {
		return err
	}
	serveN, err := perf.RSS(s.PID)
	if err != nil {
		return err
	}
	var host, cgroup, limbsd, shim, bashIn []float64
	for _, sb := range sbs {
		if sb.Container == "" { // createOnce does not look it up
			if sb.Container, err = perf.ContainerOf(ctx, sb.ID); err != nil {
				return err
			}
		}
		m, err := perf.MemoryOf(ctx, sb.Container)
		if err != nil {
			return err
		}
		host = append(host, perf.MiB(m.PSS))
		if m.Cgroup > 0 {
			cgroup = append(cgroup, perf.MiB(m.Cgroup))
		}
		shim = append(shim, perf.MiB(m.Shim.PSS))
		if p, ok := m.Find("limbsd"); ok {
			limbsd = append(limbsd, perf.MiB(p.RSS))
		}
		if p, ok := m.Find("bash"); ok {
			bashIn = append(bashIn, perf.MiB(p.PSS))
		}
	}
	e.rep.Add(perf.Row{Key: "density/serve-per-sandbox", Group: g, Name: fmt.Sprintf("limbs serve RSS per idle sandbox (%d, from %s MiB)", n, perf.Num(perf.MiB(serve0))), Unit: "MiB",
		Stats: perf.Once(perf.MiB(serveN-serve0) / float64(n))})
	e.rep.Add(perf.Row{Key: "density/sandbox-host", Group: g, Name: "host memory per idle sandbox, one session (PSS: shim, init, limbsd, bash)", Unit: "MiB", Stats: perf.Summarize(host)})
	if len(cgroup) > 0 {
		e.rep.Add(perf.Row{Key: "density/sandbox-cgroup", Group: g, Name: "the same sandbox's memory cgroup (page cache included)", Unit: "MiB", Stats: perf.Summarize(cgroup)})
	}
	e.rep.Add(perf.Row{Key: "density/sandbox-shim", Group: g, Name: "  of which containerd-shim (PSS)", Unit: "MiB", Stats: perf.Summarize(shim)})
	e.rep.Add(perf.Row{Key: "density/sandbox-limbsd", Group: g, Name: "  limbsd in the sandbox (RSS)", Unit: "MiB", Stats: perf.Summarize(limbsd)})
	e.rep.Add(perf.Row{Key: "density/sandbox-bash", Group: g, Name: "  bash of the session (PSS)", Unit: "MiB", Stats: perf.Summarize(bashIn)})
	return nil
}
