package perf

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"
)

// Report is one run of a bench mode: the machine, the rows in the order
// measured, and the targets with their outcome. It is written as JSON
// (WriteFile) so that a later run can be put next to it (Compare).
type Report struct {
	Mode    string    `json:"mode"` // "" for the table, else load, faults, ...
	Machine Machine   `json:"machine"`
	Took    float64   `json:"took_s"`
	Rows    []Row     `json:"rows"`
	Targets []Target  `json:"targets,omitempty"`
	Notes   []string  `json:"notes,omitempty"` // groups skipped and why, errors
	Started time.Time `json:"started"`
}

// Row is one figure: its samples' Stats in Unit, and its ratio to another
// row of the same run.
type Row struct {
	// Key names the figure across runs ("roundtrip/serve-docker/true"):
	// Compare matches rows by it.
	Key   string `json:"key"`
	Group string `json:"group"`
	Name  string `json:"name"` // what a reader sees in the table
	Unit  string `json:"unit"` // ms, MiB/s, MiB, ...
	// Higher is set when more is better (a throughput), for Compare.
	Higher bool `json:"higher_is_better,omitempty"`
	Stats
	// Baseline is the Key of the row this one is put next to, and Ratio
	// this row's p50 divided by that one's (set by Report.Add).
	Baseline string  `json:"baseline,omitempty"`
	Ratio    float64 `json:"ratio,omitempty"`
	Note     string  `json:"note,omitempty"`
}

// Target is one figure the project promises, with what this run got.
type Target struct {
	Name string `json:"name"`
	Want string `json:"want"`
	Got  string `json:"got"`
	Pass bool   `json:"pass"`
}

// Add appends r, computing its Ratio when its Baseline is a row already
// added.
func (rep *Report) Add(r Row) {
	if b, ok := rep.Row(r.Baseline); ok && b.P50 != 0 {
		r.Ratio = r.P50 / b.P50
	}
	rep.Rows = append(rep.Rows, r)
}

// Row returns the row of that key.
func (rep *Report) Row(key string) (Row, bool) {
	for _, r := range rep.Rows {
		if key != "" && r.Key == key {
			return r, true
		}
	}
	return Row{}, false
}

// Target records a target's outcome.
func (rep *Report) Target(name, want, got string, pass bool) {
	rep.Targets = append(rep.Targets, Target{Name: name, Want: want, Got: got, Pass: pass})
}

// Note records a line printed under the table (a group skipped, an error).
func (rep *Report) Note(format string, args ...any) {
	rep.Notes = append(rep.Notes, fmt.Sprintf(format, args...))
}

// WriteFile writes the report as indented JSON.
func (rep *Report) WriteFile(path string) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadReport reads a report WriteFile wrote.
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("%s is not a report of limbs bench --json: %w", path, err)
	}
	return &rep, nil
}

// Num formats a figure with three significant digits or so.
func Num(x float64) string {
	switch a := math.Abs(x); {
	case math.IsNaN(x):
		return "-"
	case a == 0:
		return "0"
	case a < 0.1:
		return fmt.Sprintf("%.4f", x)
	case a < 10:
		return fmt.Sprintf("%.3f", x)
	case a < 1000:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.0f", x)
	}
}

// Ratio formats a quotient: 152x, 0.87x.
func Ratio(x float64) string {
	switch {
	case x == 0 || math.IsNaN(x) || math.IsInf(x, 0):
		return ""
	case x >= 100:
		return fmt.Sprintf("%.0fx", x)
	case x >= 10:
		return fmt.Sprintf("%.1fx", x)
	default:
		return fmt.Sprintf("%.2fx", x)
	}
}

// Print writes the report as a table: the machine, each group's rows with
// n, p50, p90, p99, min, max and the ratio to its baseline, then the
// targets as PASS/FAIL lines and the notes.
func (rep *Report) Print(w io.Writer) {
	title := "limbs bench"
	if rep.Mode != "" {
		title += " " + rep.Mode
	}
	fmt.Fprintf(w, "%s: %s\n", title, rep.Machine)
	head := []string{"figure", "unit", "n", "p50", "p90", "p99", "min", "max", "ratio"}
	rows := [][]string{}
	group := ""
	for _, r := range rep.Rows {
		if r.Group != group {
			group = r.Group
			rows = append(rows, []string{"[" + group + "]", "", "", "", "", "", "", "", ""})
		}
		ratio := ""
		if r.Ratio != 0 {
			base := r.Baseline
			if b, ok := rep.Row(r.Baseline); ok {
				base = b.Name
			}
			ratio = Ratio(r.Ratio) + " " + base
		}
		name := r.Name
		if r.Note != "" {
			name += " (" + r.Note + ")"
		}
		if r.N == 1 {
			rows = append(rows, []string{name, r.Unit, "1", Num(r.P50), "", "", "", "", ratio})
			continue
		}
		rows = append(rows, []string{name, r.Unit, fmt.Sprint(r.N), Num(r.P50), Num(r.P90), Num(r.P99), Num(r.Min), Num(r.Max), ratio})
	}
	printTable(w, head, rows)
	if len(rep.Targets) > 0 {
		fmt.Fprintln(w, "\ntargets (from this run):")
		for _, t := range rep.Targets {
			v := "PASS"
			if !t.Pass {
				v = "FAIL"
			}
			fmt.Fprintf(w, "  %s  %s: %s (target %s)\n", v, t.Name, t.Got, t.Want)
		}
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	fmt.Fprintf(w, "took %.0f s\n", rep.Took)
}

// printTable writes rows under head in aligned columns, text left and
// numbers right.
func printTable(w io.Writer, head []string, rows [][]string) {
	width := make([]int, len(head))
	for _, r := range append([][]string{head}, rows...) {
		for i, c := range r {
			width[i] = max(width[i], len(c))
		}
	}
	line := func(r []string) {
		var sb strings.Builder
		for i, c := range r {
			if i == 0 || i == len(r)-1 || i == 1 {
				fmt.Fprintf(&sb, "%-*s  ", width[i], c)
			} else {
				fmt.Fprintf(&sb, "%*s  ", width[i], c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(sb.String(), " "))
	}
	line(head)
	for _, r := range rows {
		line(r)
	}
}

// Compare writes old next to new: each figure of new with its p50 in old,
// the change (new/old) and whether that is better or worse by more than
// 10%; figures only one of them has are listed after.
func Compare(w io.Writer, old, cur *Report) {
	fmt.Fprintf(w, "old: %s\nnew: %s\n", old.Machine, cur.Machine)
	head := []string{"figure", "unit", "old p50", "new p50", "new/old", ""}
	var rows [][]string
	seen := map[string]bool{}
	for _, r := range cur.Rows {
		o, ok := old.Row(r.Key)
		if !ok {
			continue
		}
		seen[r.Key] = true
		change, verdict := "", ""
		if o.P50 != 0 {
			q := r.P50 / o.P50
			change = fmt.Sprintf("%.2f", q)
			switch better := (q > 1) == r.Higher; {
			case q > 0.9 && q < 1.1:
				verdict = "same"
			case better:
				verdict = "better"
			default:
				verdict = "worse"
			}
		}
		rows = append(rows, []string{r.Name, r.Unit, Num(o.P50), Num(r.P50), change, verdict})
	}
	printTable(w, head, rows)
	for _, r := range cur.Rows {
		if !seen[r.Key] {
			fmt.Fprintf(w, "only in new: %s\n", r.Name)
		}
	}
	for _, r := range old.Rows {
		if !seen[r.Key] {
			fmt.Fprintf(w, "only in old: %s\n", r.Name)
		}
	}
}
