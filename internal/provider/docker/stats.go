package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/limbs-dev/limbs/internal/sandbox"
)

// maxStatsBody bounds the engine's stats answer read.
const maxStatsBody = 1 << 20

// Stats asks the engine for one sample of a sandbox container's resource
// use (GET /containers/ID/stats?stream=false&one-shot=true: no second
// sample is waited for, so the CPU figure is the cumulative time).
// Memory is the cgroup's usage without its inactive page cache, as
// `docker stats` shows it.
func (p *Provider) Stats(ctx context.Context, id string) (sandbox.Stats, error) {
	if _, err := p.container(ctx, id); err != nil {
		return sandbox.Stats{}, err
	}
	res, err := p.cli.ContainerStats(ctx, containerName(id), client.ContainerStatsOptions{})
	if err != nil {
		return sandbox.Stats{}, engineErr(fmt.Sprintf("stats of sandbox %q", id), err)
	}
	defer res.Body.Close()
	var s container.StatsResponse
	if err := json.NewDecoder(io.LimitReader(res.Body, maxStatsBody)).Decode(&s); err != nil {
		return sandbox.Stats{}, fmt.Errorf("stats of sandbox %q: reading the engine's answer: %w", id, err)
	}
	mem := s.MemoryStats.Usage
	if cache, ok := s.MemoryStats.Stats["inactive_file"]; ok && cache < mem {
		mem -= cache
	}
	return sandbox.Stats{
		CPUNanos:         s.CPUStats.CPUUsage.TotalUsage,
		MemoryBytes:      mem,
		MemoryLimitBytes: s.MemoryStats.Limit,
		Pids:             s.PidsStats.Current,
		Time:             s.Read,
	}, nil
}
