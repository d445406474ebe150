package load

import (
	"math"
	"sort"
	"time"
)

// Latency is a summary of durations, in milliseconds.
type Latency struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P90 float64 `json:"p90_ms"`
	P99 float64 `json:"p99_ms"`
	Min float64 `json:"min_ms"`
	Max float64 `json:"max_ms"`
}

// summarize sorts ds (in place) and takes its percentiles, nearest rank.
func summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	ms := func(d time.Duration) float64 { return math.Round(float64(d)/1e4) / 100 }
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(ds)))) - 1
		return ds[max(0, min(i, len(ds)-1))]
	}
	return Latency{N: len(ds), P50: ms(rank(0.50)), P90: ms(rank(0.90)), P99: ms(rank(0.99)), Min: ms(ds[0]), Max: ms(ds[len(ds)-1])}
}

// slope is the least-squares slope of ys over xs, and its standard error
// (0 with fewer than three points).
func slope(xs, ys []float64) (b, se float64) {
	n := float64(len(xs))
	if len(xs) < 2 {
		return 0, 0
	}
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= n
	my /= n
	var sxx, sxy float64
	for i := range xs {
		sxx += (xs[i] - mx) * (xs[i] - mx)
		sxy += (xs[i] - mx) * (ys[i] - my)
	}
	if sxx == 0 {
		return 0, 0
	}
	b = sxy / sxx
	if len(xs) > 2 {
		var ss float64
		for i := range xs {
			r := ys[i] - (my + b*(xs[i]-mx))
			ss += r * r
		}
		se = math.Sqrt(ss / (n - 2) / sxx)
	}
	return b, se
}
