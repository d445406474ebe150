package tool

import (
	"testing"

	"github.com/limbs-dev/limbs/internal/wire"
)

func TestBackgroundNote(t *testing.T) {
	var o ShellOutput
	if n := backgroundNote(o); n != "" {
		t.Fatalf("nothing left running: note %q", n)
	}
	backgroundOf(&o, wire.Result{Background: []wire.BackgroundProcess{{PID: 7, Command: "sleep 100"}}, BackgroundCount: 1})
	if got, want := backgroundNote(o), "[1 background process still running: pid 7 `sleep 100`; it keeps running after the command, in this session (kill PID stops one)]"; got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	o = ShellOutput{}
	backgroundOf(&o, wire.Result{Background: []wire.BackgroundProcess{{PID: 7, Command: "a"}, {PID: 8, Command: "b"}}, BackgroundCount: 12})
	if got, want := backgroundNote(o), "[12 background processes still running: pid 7 `a`, pid 8 `b` and 10 more; they keep running after the command, in this session (kill PID stops one)]"; got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}
