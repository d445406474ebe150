package control_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/provider/docker"
	"github.com/limbs-dev/limbs/internal/wire"
)

// BenchmarkCheckpoints is acceptance 5 of docs/checkpoints.md (make
// bench-checkpoints): on the acceptance workspace (10,000 files and a
// 100 MB one, LIMBS_BENCH_CKPT_BIG bytes) of a Docker sandbox, one table
// side by side: the first checkpoint, checkpoints after a one-file change
// (p50 of LIMBS_BENCH_CKPT_ROUNDS, and p50 frozen), a restore after a
// small change, a fork of 10 from a warm pool of LIMBS_BENCH_CKPT_POOL
// (10) and one of new containers; next to tar of the same tree inside the
// sandbox and docker commit of its container. Run it with -benchtime 1x.
func BenchmarkCheckpoints(b *testing.B) {
	big := envInt("LIMBS_BENCH_CKPT_BIG", 100<<20)
	rounds := envInt("LIMBS_BENCH_CKPT_ROUNDS", 20)
	pool := envInt("LIMBS_BENCH_CKPT_POOL", 10)
	p, sb, c := dockerSessionPool(b, stateDir(b), map[string]int{docker.DefaultImage: pool})
	execIn(b, c, fmt.Sprintf("export W=/workspace BIG=%d; %s", big, genTree))
	// On the disk before anything is timed: the first checkpoint is
	// timed, not the write-back of the tree the set-up wrote.
	execIn(b, c, "sync")
	// The pool fills before anything is timed.
	deadline := time.Now().Add(5 * time.Minute)
	for p.srv.PoolReady(docker.DefaultImage) < pool {
		if time.Now().After(deadline) {
			b.Fatalf("the warm pool of %d did not fill", pool)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := 0; i < b.N; i++ {
		rows := benchRows(b, p, sb, rounds, pool)
		fmt.Fprintf(os.Stdout, "\ncheckpoints of a workspace of 10,000 files + %d MB (Docker, %d rounds)\n", big>>20, rounds)
		fmt.Fprintf(os.Stdout, "%-34s %10s %12s %s\n", "operation", "ms", "frozen ms", "vs tar")
		tar := rows[len(rows)-2].ms
		for _, r := range rows {
			frozen := "-"
			if r.frozen >= 0 {
				frozen = strconv.FormatFloat(r.frozen, 'f', 1, 64)
			}
			fmt.Fprintf(os.Stdout, "%-34s %10.1f %12s %6.2fx\n", r.name, r.ms, frozen, r.ms/tar)
			b.ReportMetric(r.ms, r.metric+"-ms")
		}
	}
}

type benchRow struct {
	name, metric string
	ms, frozen   float64
}

func p50(v []float64) float64 {
	sort.Float64s(v)
	return v[len(v)/2]
}

func benchRows(b *testing.B, p *plane, sb string, rounds, pool int) []benchRow {
	ctx := context.Background()
	sbs := p.c.Sandboxes()
	c := p.sandboxClient(b, sb)
	var rows []benchRow
	start := time.Now()
	first, err := sbs.Checkpoint(ctx, sb, wire.CreateCheckpoint{Name: "first"})
	if err != nil {
		b.Fatal(err)
	}
	rows = append(rows, benchRow{"first checkpoint", "first", ms(time.Since(start)), float64(first.FrozenMS)})
	var took, frozen []float64
	for i := 0; i < rounds; i++ {
		execIn(b, c, fmt.Sprintf(`echo round %d >> /workspace/tree/d0/f0.txt`, i))
		start := time.Now()
		cp, err := sbs.Checkpoint(ctx, sb, wire.CreateCheckpoint{})
		if err != nil {
			b.Fatal(err)
		}
		took = append(took, ms(time.Since(start)))
		frozen = append(frozen, float64(cp.FrozenMS))
		b.Logf("round %d: %.1f ms, frozen %d (stop %d, walk %d), store %d", i, took[len(took)-1], cp.FrozenMS, cp.StopMS, cp.WalkMS, cp.DurationMS)
	}
	rows = append(rows, benchRow{"checkpoint after 1-file change p50", "small", p50(took), p50(frozen)})
	execIn(b, c, `rm -rf /workspace/tree/d5 && echo x > /workspace/tree/new`)
	start = time.Now()
	res, err := sbs.Restore(ctx, sb, first.ID)
	if err != nil {
		b.Fatal(err)
	}
	rows = append(rows, benchRow{fmt.Sprintf("restore (%d written, %d removed)", res.Written, res.Removed), "restore", ms(time.Since(start)), float64(res.FrozenMS)})
	fork := func(label, metric string) {
		start := time.Now()
		fk, err := sbs.Fork(ctx, sb, wire.Fork{Count: 10, Checkpoint: first.ID})
		if err != nil {
			b.Fatal(err)
		}
		rows = append(rows, benchRow{label, metric, ms(time.Since(start)), -1})
		rows = append(rows, benchRow{fmt.Sprintf("  of which: tree (shared %v)", fk.Shared), metric + "-tree", float64(fk.TreeMS), -1})
		rows = append(rows, benchRow{fmt.Sprintf("  slowest create (%d from the pool)", fk.FromPool), metric + "-create", float64(fk.CreateMS), -1})
		rows = append(rows, benchRow{"  slowest restore", metric + "-restore", float64(fk.RestoreMS), -1})
		var wg sync.WaitGroup
		for _, f := range fk.Sandboxes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = sbs.Remove(context.Background(), f.ID)
			}()
		}
		wg.Wait()
	}
	if pool > 0 {
		fork(fmt.Sprintf("fork of 10, warm pool of %d", pool), "fork10-pool")
		// No refills under the rest of the table.
		if err := p.srv.DrainPool(ctx); err != nil {
			b.Fatal(err)
		}
	}
	fork("fork of 10, new containers", "fork10")
	start = time.Now()
	execIn(b, c, `tar -cf - -C /workspace tree | cat > /dev/null`)
	rows = append(rows, benchRow{"tar of the same tree (in sandbox)", "tar", ms(time.Since(start)), -1})
	img := "limbs-bench-ckpt:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	start = time.Now()
	if out, err := exec.Command("docker", "commit", "limbs-"+sb, img).CombinedOutput(); err != nil {
		b.Fatalf("docker commit: %v: %s", err, out)
	}
	rows = append(rows, benchRow{"docker commit (volume excluded)", "commit", ms(time.Since(start)), -1})
	_ = exec.Command("docker", "rmi", "-f", img).Run()
	for _, cp := range mustList(b, p, sb) {
		_ = sbs.DeleteCheckpoint(ctx, sb, cp.ID)
	}
	return rows
}

func mustList(b *testing.B, p *plane, sb string) []wire.Checkpoint {
	l, err := p.c.Sandboxes().Checkpoints(context.Background(), sb)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
