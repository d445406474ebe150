package load

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what a run found. Pass is false when any command was wrong,
// hung or failed without a typed reason (in the load and the soak: when
// any failed at all), a fault was not seen, something was left over, or
// (the soak) a sampled figure grew.
type Report struct {
	Mode      string  `json:"mode"` // load, faults, soak
	Provider  string  `json:"provider"`
	Clients   int     `json:"clients"`
	Sandboxes int     `json:"sandboxes"`
	Seed      int64   `json:"seed"`
	Seconds   float64 `json:"seconds"`
	// Machine is the host, with its load average before the run; Load is
	// the load average at the load's end.
	Machine string  `json:"machine"`
	Load    float64 `json:"load_average_end"`

	Commands  int          `json:"commands"`
	PerSecond float64      `json:"commands_per_second"`
	Kinds     []KindReport `json:"kinds"`
	// Errors are commands that count against the run: wrong, hung,
	// untyped, and in the load and the soak failed ones too.
	Errors int `json:"errors"`
	// Failures counts failed commands by reason and by what the event
	// log says of them.
	Failures map[string]int `json:"failures,omitempty"`
	// Examples are a few commands that count as errors.
	Examples []string `json:"examples,omitempty"`
	Faults   []Fault  `json:"faults,omitempty"`

	Samples []Sample `json:"samples,omitempty"`
	Slopes  []Slope  `json:"slopes,omitempty"`

	// Goroutines of limbs serve: at its start, and once every sandbox was
	// removed (both 0 when unknown).
	Goroutines [2]int   `json:"goroutines"`
	Leftovers  []string `json:"leftovers,omitempty"`
	// ServeLog counts the warnings and errors limbs serve logged, by
	// message (faults make some; none fails the run).
	ServeLog map[string]int `json:"serve_log,omitempty"`
	Problems []string       `json:"problems,omitempty"`
	// Growth lists the sampled figures that are not flat (also in
	// Problems).
	Growth []string `json:"growth,omitempty"`
	Pass   bool     `json:"pass"`
}

// KindReport is one kind of command: how many of each outcome, and the
// latency of the ok ones (from the first request to the end).
type KindReport struct {
	Kind    string  `json:"kind"`
	Count   int     `json:"count"`
	OK      int     `json:"ok"`
	Failed  int     `json:"failed"`
	Wrong   int     `json:"wrong"`
	Hung    int     `json:"hung"`
	Untyped int     `json:"untyped"`
	Resumed int     `json:"resumed"` // ok after a fault cut its connection
	Latency Latency `json:"latency"`
}

// goroutineSlack is how many more goroutines serve may run once its
// sandboxes are gone than when it started: its listener's and the
// metrics scrape's own connections.
const goroutineSlack = 8

func (r *run) finish(rep *Report) {
	r.mu.Lock()
	defer r.mu.Unlock()
	kinds := map[string]*KindReport{}
	lat := map[string][]time.Duration{}
	rep.Failures = map[string]int{}
	for _, rec := range r.records {
		k := kinds[rec.kind]
		if k == nil {
			k = &KindReport{Kind: rec.kind}
			kinds[rec.kind] = k
		}
		k.Count++
		bad := false
		switch rec.outcome {
		case OutcomeOK:
			k.OK++
			if rec.resumed != "" {
				k.Resumed++
			} else {
				lat[rec.kind] = append(lat[rec.kind], rec.dur)
			}
		case OutcomeFailed:
			k.Failed++
			key := rec.reason
			if rec.note != "" {
				key += " (" + rec.note + ")"
			}
			rep.Failures[key]++
			bad = !r.opts.Faults
		case OutcomeWrong:
			k.Wrong++
			bad = true
		case OutcomeHung:
			k.Hung++
			bad = true
		default:
			k.Untyped++
			bad = true
		}
		if bad {
			rep.Errors++
			if len(rep.Examples) < 10 {
				rep.Examples = append(rep.Examples, fmt.Sprintf("%s %s (client %d, sandbox %s, at %.1fs%s): %s %s: %q",
					rec.kind, rec.token, rec.client, rec.sandbox, rec.start.Sub(r.started).Seconds(), prefixed("; ", rec.resumed), rec.outcome, rec.reason+prefixed("; ", rec.note), rec.output))
			}
		}
	}
	rep.Commands = len(r.records)
	if rep.Seconds > 0 {
		rep.PerSecond = float64(rep.Commands) / rep.Seconds
	}
	for _, name := range []string{KindShort, KindChatty, KindInput, KindFile, KindDisconnect} {
		if k := kinds[name]; k != nil {
			k.Latency = summarize(lat[name])
			rep.Kinds = append(rep.Kinds, *k)
		}
	}
	rep.Faults = r.faults
	rep.ServeLog = r.warnings
	if rep.Errors > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d commands count as errors (see examples)", rep.Errors))
	}
	if rep.Commands == 0 {
		rep.Problems = append(rep.Problems, "no command ran")
	}
	if r.opts.Faults {
		kinds := r.opts.FaultKinds
		if len(kinds) == 0 {
			kinds = FaultKinds(r.opts.Provider)
		}
		for _, want := range kinds {
			ok := false
			for _, f := range r.faults {
				ok = ok || (f.Kind == want && f.OK)
			}
			if !ok {
				rep.Problems = append(rep.Problems, "no fault "+want+" was injected and seen")
			}
		}
		for _, f := range r.faults {
			if f.Err != "" || !f.OK {
				rep.Problems = append(rep.Problems, fmt.Sprintf("fault %s on %s at %.1fs: %s%s", f.Kind, f.Target, f.At, f.Err, prefixed(" seen: ", f.Seen)))
			}
		}
	}
	if len(rep.Leftovers) > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d things left over", len(rep.Leftovers)))
	}
	if g := rep.Goroutines; g[0] > 0 && g[1] > g[0]+goroutineSlack {
		rep.Problems = append(rep.Problems, fmt.Sprintf("limbs serve runs %d goroutines with no sandbox left, %d at its start", g[1], g[0]))
	}
	if len(rep.Samples) > 0 {
		rep.Slopes = slopes(rep.Samples, rep.Seconds)
		for _, s := range rep.Slopes {
			if !s.Flat {
				rep.Growth = append(rep.Growth, fmt.Sprintf("%s grows %.3g %s per minute (threshold %.3g)", s.Name, s.PerMinute, s.Unit, s.Threshold))
			}
		}
		rep.Problems = append(rep.Problems, rep.Growth...)
		if len(rep.Samples) < 3 {
			rep.Problems = append(rep.Problems, fmt.Sprintf("only %d samples: run the soak for longer than 3 --sample periods", len(rep.Samples)))
		}
	}
	rep.Pass = len(rep.Problems) == 0
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

// Print writes the report as tables.
func (rep *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "limbs bench %s: %d clients over %d %s sandboxes, %.1f s, seed %d\n",
		rep.Mode, rep.Clients, rep.Sandboxes, rep.Provider, rep.Seconds, rep.Seed)
	fmt.Fprintf(w, "machine: %s at the start, %.1f at the end\n\n", rep.Machine, rep.Load)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kind\tcommands\tok\tfailed\twrong\thung\tuntyped\tresumed\tp50 ms\tp90 ms\tp99 ms\tmin ms\tmax ms\t")
	for _, k := range rep.Kinds {
		l := k.Latency
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", k.Kind, k.Count, k.OK, k.Failed, k.Wrong, k.Hung, k.Untyped, k.Resumed, l.P50, l.P90, l.P99, l.Min, l.Max)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%d commands, %.1f commands/s, %d errors\n", rep.Commands, rep.PerSecond, rep.Errors)
	if len(rep.Failures) > 0 {
		fmt.Fprintln(w, "\nfailed with a typed reason (reason, what the event log says):")
		keys := make([]string, 0, len(rep.Failures))
		for k := range rep.Failures {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %5d  %s\n", rep.Failures[k], k)
		}
	}
	if len(rep.Faults) > 0 {
		fmt.Fprintln(w, "\nfaults:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  at s\tkind\ttarget\tsettled s\tok\tseen")
		for _, f := range rep.Faults {
			fmt.Fprintf(tw, "  %.1f\t%s\t%s\t%.1f\t%v\t%s%s\n", f.At, f.Kind, f.Target, f.Settled, f.OK, f.Seen, prefixed("; error: ", f.Err))
		}
		tw.Flush()
	}
	if len(rep.Samples) > 0 {
		fmt.Fprintln(w, "\nsamples:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "t s\tcommands\tserve RSS MiB\tserve fds\tlimbsd RSS MiB (sum)\tlimbsd fds (sum)\tlimbsds\t")
		for _, s := range rep.Samples {
			fmt.Fprintf(tw, "%.0f\t%d\t%.1f\t%d\t%.1f\t%d\t%d\t\n", s.T, s.Commands, float64(s.ServeRSSKiB)/1024, s.ServeFDs, float64(s.LimbsdRSSKiB)/1024, s.LimbsdFDs, s.Limbsds)
		}
		tw.Flush()
		fmt.Fprintln(w, "\nslopes (least squares over the samples after the warm-up):")
		for _, s := range rep.Slopes {
			verdict := "flat"
			if !s.Flat {
				verdict = "GROWS"
			}
			fmt.Fprintf(w, "  %-16s %+8.3f %s/min  (mean %.1f, threshold %.3f/min): %s\n", s.Name, s.PerMinute, s.Unit, s.Mean, s.Threshold, verdict)
		}
	}
	fmt.Fprintf(w, "\nlimbs serve goroutines: %d at start, %d after every sandbox was removed\n", rep.Goroutines[0], rep.Goroutines[1])
	if len(rep.Leftovers) == 0 {
		fmt.Fprintln(w, "left over: nothing (containers and volumes of the instance, sandbox directories, processes)")
	} else {
		fmt.Fprintf(w, "left over:\n  %s\n", strings.Join(rep.Leftovers, "\n  "))
	}
	if len(rep.ServeLog) > 0 {
		fmt.Fprintln(w, "limbs serve logged (warnings and errors, by message):")
		keys := make([]string, 0, len(rep.ServeLog))
		for k := range rep.ServeLog {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %5d  %s\n", rep.ServeLog[k], k)
		}
	}
	for _, e := range rep.Examples {
		fmt.Fprintf(w, "error: %s\n", e)
	}
	if rep.Pass {
		fmt.Fprintln(w, "PASS")
	} else {
		fmt.Fprintf(w, "FAIL:\n  %s\n", strings.Join(rep.Problems, "\n  "))
	}
}
