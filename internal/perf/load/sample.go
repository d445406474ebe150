package load

import (
	"context"
	"math"
	"time"
)

// Sample is serve's and the limbsds' resident memory and open files at
// one moment of a soak.
type Sample struct {
	T            float64 `json:"t_s"` // since the load's start
	Commands     int64   `json:"commands"`
	ServeRSSKiB  int64   `json:"serve_rss_kib"`
	ServeFDs     int     `json:"serve_fds"`
	LimbsdRSSKiB int64   `json:"limbsd_rss_kib"` // the sum over the sandboxes
	LimbsdFDs    int     `json:"limbsd_fds"`     // the sum over the sandboxes
	Limbsds      int     `json:"limbsds"`        // how many were found
}

// sample takes a sample at once and then every opts.Sample until stop.
func (r *run) sample(ctx context.Context, stop <-chan struct{}) []Sample {
	start := time.Now()
	var out []Sample
	t := time.NewTicker(r.opts.Sample)
	defer t.Stop()
	for range 1_000_000 {
		out = append(out, r.sampleNow(ctx, start))
		select {
		case <-stop:
			return out
		case <-ctx.Done():
			return out
		case <-t.C:
		}
	}
	return out
}

func (r *run) sampleNow(ctx context.Context, start time.Time) Sample {
	s := Sample{T: time.Since(start).Seconds(), Commands: r.done.Load()}
	spid := r.sv.pid()
	s.ServeRSSKiB, s.ServeFDs = rssKiB(spid), fdCount(spid)
	var pids []int
	if r.opts.Provider == "local" {
		for _, p := range descendants(spid) {
			if comm(p) == "limbsd" {
				pids = append(pids, p)
			}
		}
	} else {
		for _, init := range containerPIDs(ctx, r.ids) {
			if p := limbsdOf(init); p != 0 {
				pids = append(pids, p)
			}
		}
	}
	for _, p := range pids {
		s.LimbsdRSSKiB += rssKiB(p)
		s.LimbsdFDs += fdCount(p)
	}
	s.Limbsds = len(pids)
	return s
}

// Slope is the least-squares growth of one sampled figure.
type Slope struct {
	Name      string  `json:"name"`
	Unit      string  `json:"unit"`
	PerMinute float64 `json:"per_minute"`
	StdErr    float64 `json:"std_err"`
	Mean      float64 `json:"mean"`
	Threshold float64 `json:"threshold_per_minute"`
	Flat      bool    `json:"flat"`
}

// slopes fits each figure over the samples after the warm-up (the first
// fifth of the run, at least the first sample: heaps, connection pools
// and the kernel's page cache grow to their working size there).
//
// A figure is flat when its slope is at most its threshold: a fixed
// growth allowed over the whole fitted window, plus two standard errors
// of the slope (the sampling noise of this run). The allowance is what a
// healthy process may still add once under a steady load: for RSS 2 MiB
// or 5% of the mean, whichever is more (a Go heap's next GC target and
// the scavenger's lag; a limbsd's is 1 MiB each), for descriptors 4 (kept-
// alive connections being replaced). A leak grows with time, so it
// exceeds a fixed allowance once the window is long enough: a leak of
// 1 KiB per command at 300 commands/s is 17 MiB a minute, far above the
// 0.25 MiB a minute allowed for serve over an 8-minute window.
func slopes(samples []Sample, seconds float64) []Slope {
	warm := 0.2 * seconds
	var fit []Sample
	for i, s := range samples {
		if i > 0 && s.T >= warm {
			fit = append(fit, s)
		}
	}
	if len(fit) < 3 {
		fit = samples[min(1, len(samples)-1):]
	}
	if len(fit) < 2 {
		return nil
	}
	window := (fit[len(fit)-1].T - fit[0].T) / 60
	if window <= 0 {
		return nil
	}
	n := float64(max(1, fit[len(fit)-1].Limbsds))
	figures := []struct {
		name, unit string
		get        func(Sample) float64
		floor, pct float64
	}{
		{"serve RSS", "MiB", func(s Sample) float64 { return float64(s.ServeRSSKiB) / 1024 }, 2, 0.05},
		{"serve fds", "fds", func(s Sample) float64 { return float64(s.ServeFDs) }, 4, 0},
		{"limbsd RSS (sum)", "MiB", func(s Sample) float64 { return float64(s.LimbsdRSSKiB) / 1024 }, n, 0.05},
		{"limbsd fds (sum)", "fds", func(s Sample) float64 { return float64(s.LimbsdFDs) }, 4, 0},
	}
	var out []Slope
	for _, f := range figures {
		xs := make([]float64, len(fit))
		ys := make([]float64, len(fit))
		mean := 0.0
		for i, s := range fit {
			xs[i] = s.T / 60
			ys[i] = f.get(s)
			mean += ys[i]
		}
		mean /= float64(len(fit))
		b, se := slope(xs, ys)
		th := math.Max(f.floor, f.pct*mean)/window + 2*se
		out = append(out, Slope{Name: f.name, Unit: f.unit, PerMinute: round3(b), StdErr: round3(se), Mean: round3(mean), Threshold: round3(th), Flat: b <= th})
	}
	return out
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
