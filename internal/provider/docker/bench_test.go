package docker

import (
	"context"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Benchmarks for acceptance 6, provider side:
//
//	go test -run '^$' -bench . -benchtime 10x ./internal/provider/docker/
//
// BenchmarkDockerRunTrue is the reference a sandbox's cold start is
// compared with; the exec benchmarks compare a command through limbsd's
// session with `docker exec` of the same command.

// BenchmarkCreateToFirstCommand: Create (volume, container, start, limbsd
// healthy), a session, and `true` run in it. Removal is not timed.
func BenchmarkCreateToFirstCommand(b *testing.B) {
	p := newProvider(b)
	ctx := b.Context()
	zero := 0.0
	for b.Loop() {
		spec := newSpec(b, p, nil)
		inst, err := createReady(ctx, p, spec)
		if err != nil {
			b.Fatal(err)
		}
		lc := limbsdClient(b, p, spec)
		s, err := lc.CreateSession(ctx, wire.CreateSession{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := lc.Exec(ctx, s.ID, wire.Exec{Command: "true", YieldAfter: &zero}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		lc.HTTPClient().CloseIdleConnections()
		if err := p.Remove(ctx, inst.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkDockerRunTrue is `docker run --rm limbs/base true` through the
// API: create, start, wait, remove.
func BenchmarkDockerRunTrue(b *testing.B) {
	p := newProvider(b)
	ctx := b.Context()
	for b.Loop() {
		c, err := p.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
			Config:     &container.Config{Image: DefaultImage, Cmd: []string{"true"}, Labels: map[string]string{sandbox.LabelManaged: "true"}},
			HostConfig: &container.HostConfig{NetworkMode: "none"},
		})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := p.cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
			b.Fatal(err)
		}
		w := p.cli.ContainerWait(ctx, c.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
		select {
		case <-w.Result:
		case err := <-w.Error:
			b.Fatal(err)
		}
		if _, err := p.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExecRoundTrip compares one trivial command on a warm session
// through limbsd's socket with `docker exec` of it.
func BenchmarkExecRoundTrip(b *testing.B) {
	p := newProvider(b)
	ctx := b.Context()
	spec := newSpec(b, p, nil)
	inst, err := createReady(ctx, p, spec)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Remove(context.Background(), inst.ID) })
	lc := limbsdClient(b, p, spec)

	b.Run("limbsd", func(b *testing.B) {
		s, err := lc.CreateSession(ctx, wire.CreateSession{})
		if err != nil {
			b.Fatal(err)
		}
		zero := 0.0
		for b.Loop() {
			if _, err := lc.Exec(ctx, s.ID, wire.Exec{Command: "true", YieldAfter: &zero}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("docker-exec", func(b *testing.B) {
		for b.Loop() {
			ex, err := p.cli.ExecCreate(ctx, inst.ProviderID, client.ExecCreateOptions{Cmd: []string{"true"}})
			if err != nil {
				b.Fatal(err)
			}
			att, err := p.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
			if err != nil {
				b.Fatal(err)
			}
			for {
				if _, err := att.Reader.Discard(1 << 16); err != nil {
					break
				}
			}
			att.Close()
		}
	})
}
