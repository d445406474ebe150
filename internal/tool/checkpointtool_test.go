package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/wire"
)

// fakeCheckpoints is a control plane that keeps checkpoints in memory.
type fakeCheckpoints struct {
	list     []wire.Checkpoint
	restored []string
}

func (f *fakeCheckpoints) Checkpoint(_ context.Context, sb string, req wire.CreateCheckpoint) (wire.Checkpoint, error) {
	cp := wire.Checkpoint{ID: fmt.Sprintf("cp_%d", len(f.list)+1), Name: req.Name, Sandbox: sb, Files: 3, Size: 42}
	f.list = append(f.list, cp)
	return cp, nil
}

func (f *fakeCheckpoints) Checkpoints(context.Context, string) ([]wire.Checkpoint, error) {
	return f.list, nil
}

func (f *fakeCheckpoints) Restore(_ context.Context, sb, cp string) (wire.Restored, error) {
	f.restored = append(f.restored, cp)
	return wire.Restored{Checkpoint: cp, Written: 2, Removed: 1}, nil
}

func TestCheckpointTools(t *testing.T) {
	f := &fakeCheckpoints{}
	specs := CheckpointTools(f, "sb_x")
	call := func(name, args string) CallResult {
		t.Helper()
		for _, s := range specs {
			if s.Name == name {
				r, err := s.Call(context.Background(), json.RawMessage(args))
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
		}
		t.Fatalf("no tool %s", name)
		return CallResult{}
	}
	if r := call("rollback", `{}`); !r.IsError || !strings.Contains(r.Text, "no checkpoint yet") {
		t.Errorf("rollback without a checkpoint: %+v", r)
	}
	if r := call("checkpoint", `{"name":"green"}`); r.IsError || !strings.Contains(r.Text, `cp_1 ("green")`) {
		t.Errorf("checkpoint: %+v", r)
	}
	call("checkpoint", `{}`)
	if r := call("rollback", `{"checkpoint":"green"}`); r.IsError || !strings.Contains(r.Text, "rolled back to checkpoint cp_1") {
		t.Errorf("rollback by name: %+v", r)
	}
	if r := call("rollback", `{}`); r.IsError || f.restored[len(f.restored)-1] != "cp_2" {
		t.Errorf("rollback to the newest: %+v %v", r, f.restored)
	}
	if r := call("rollback", `{"checkpoint":"nope"}`); !r.IsError || !strings.Contains(r.Text, "cp_1 (\"green\"), cp_2") {
		t.Errorf("rollback to an unknown one: %+v", r)
	}
	if r := call("checkpoint", `{"bogus":1}`); !r.IsError {
		t.Errorf("an unknown field passed: %+v", r)
	}
}
