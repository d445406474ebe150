package main

import (
	"flag"
	"os"
	"runtime"
	"testing"

	"github.com/limbs-dev/limbs/internal/metrics"
)

func TestServeProcs(t *testing.T) {
	for _, c := range []struct {
		flag int
		env  bool
		def  int
		want int
	}{
		{0, false, 2, 1}, // a quarter, at least one
		{0, false, 1, 1}, // at least one
		{0, false, 8, 2}, // a quarter
		{0, false, 64, 16},
		{0, true, 8, 0},  // GOMAXPROCS set: the runtime's
		{3, false, 8, 3}, // the flag wins
		{3, true, 8, 3},  // over the environment too
	} {
		if got := serveProcs(c.flag, c.env, c.def); got != c.want {
			t.Errorf("serveProcs(%d, %v, %d) = %d, want %d", c.flag, c.env, c.def, got, c.want)
		}
	}
}

// The real limbs serve runs with the GOMAXPROCS --procs names, and by
// default with a quarter of what the runtime would take: its own
// /metrics says so (go_sched_gomaxprocs_threads).
func TestServeProcsApplied(t *testing.T) {
	def := float64(max(1, runtime.GOMAXPROCS(0)/4))
	if os.Getenv("GOMAXPROCS") != "" {
		def = float64(runtime.GOMAXPROCS(0)) // limbs serve inherits it
	}
	cases := []struct {
		flags []string
		want  float64
	}{
		{nil, def},
		{[]string{"--procs", "3"}, 3},
	}
	if f := flag.Lookup("test.cpu"); f != nil && f.Value.String() != "" {
		// go test -cpu changes this process's GOMAXPROCS, not what
		// limbs serve's runtime finds: the default is not known here.
		cases = cases[1:]
	}
	for _, c := range cases {
		addr, _ := realServe(t, c.flags...)
		fams, code := scrape(t, "http://"+addr, "tok")
		if code != 200 {
			t.Fatalf("/metrics: %d", code)
		}
		if got, _ := metrics.Value(fams, "go_sched_gomaxprocs_threads"); got != c.want {
			t.Errorf("limbs serve %v: GOMAXPROCS %v, want %v", c.flags, got, c.want)
		}
	}
}
