package perf

import (
	"math"
	"slices"
	"time"
)

// Stats summarizes samples of one figure, in the figure's unit.
type Stats struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// Summarize returns the percentiles of xs (nearest rank, so that every
// figure printed is a sample that happened); the zero Stats for none.
func Summarize(xs []float64) Stats {
	if len(xs) == 0 {
		return Stats{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	return Stats{
		N: len(s), P50: Percentile(s, 50), P90: Percentile(s, 90), P99: Percentile(s, 99),
		Min: s[0], Max: s[len(s)-1], Mean: sum / float64(len(s)),
	}
}

// Percentile is the nearest-rank p-th percentile of sorted (ascending).
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(len(sorted)-1, i))]
}

// Millis turns durations into milliseconds, the unit of latency rows.
func Millis(d []time.Duration) []float64 {
	out := make([]float64, len(d))
	for i, x := range d {
		out[i] = float64(x) / float64(time.Millisecond)
	}
	return out
}

// Once is the Stats of a figure measured once (an RSS, a total).
func Once(x float64) Stats { return Summarize([]float64{x}) }
