package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/wire"
)

// fakeSandboxes is a control plane in memory.
type fakeSandboxes struct{ l []wire.Sandbox }

func (f *fakeSandboxes) Create(_ context.Context, req wire.CreateSandbox) (wire.Sandbox, error) {
	if req.Image == "bad" {
		return wire.Sandbox{}, fmt.Errorf("image %q not found: %w", req.Image, wire.ErrBadRequest)
	}
	s := wire.Sandbox{ID: fmt.Sprintf("sb_%d", len(f.l)+1), Name: req.Name, Image: req.Image, Status: wire.SandboxRunning}
	f.l = append(f.l, s)
	return s, nil
}

func (f *fakeSandboxes) List(context.Context) ([]wire.Sandbox, error) { return f.l, nil }

func (f *fakeSandboxes) Remove(_ context.Context, id string) error {
	for i, s := range f.l {
		if s.ID == id || s.Name == id {
			f.l = append(f.l[:i], f.l[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("no sandbox %q: %w", id, wire.ErrNotFound)
}

func TestSandboxTools(t *testing.T) {
	f := &fakeSandboxes{}
	specs := map[string]Spec{}
	for _, s := range SandboxTools(f) {
		specs[s.Name] = s
		if !json.Valid(s.InputSchema) {
			t.Errorf("%s: input schema is not JSON", s.Name)
		}
	}
	call := func(name, args string) CallResult {
		t.Helper()
		r, err := specs[name].Call(context.Background(), json.RawMessage(args))
		if err != nil {
			t.Fatalf("%s %s: %v", name, args, err)
		}
		return r
	}
	if r := call("sandbox_create", `{"image": "limbs/base", "name": "w1"}`); r.IsError || r.Text != "created sandbox sb_1 (w1) from image limbs/base; status running\n" {
		t.Errorf("sandbox_create: %+v", r)
	}
	if r := call("sandbox_create", `{"image": "bad"}`); !r.IsError || !strings.Contains(r.Text, `image "bad" not found`) {
		t.Errorf("sandbox_create of a bad image: %+v", r)
	}
	if r := call("sandbox_create", `{"cpus": 4}`); !r.IsError || !strings.Contains(r.Text, "cpus") {
		t.Errorf("sandbox_create with an unknown field: %+v", r)
	}
	if r := call("sandbox_list", `{}`); r.IsError || r.Text != "sb_1 (w1)  image limbs/base  running\n" || len(r.Structured.(SandboxOutput).Sandboxes) != 1 {
		t.Errorf("sandbox_list: %+v", r)
	}
	if r := call("sandbox_delete", `{"sandbox": "w1"}`); r.IsError || len(f.l) != 0 {
		t.Errorf("sandbox_delete: %+v, left %+v", r, f.l)
	}
	if r := call("sandbox_delete", `{"sandbox": "w1"}`); !r.IsError || !strings.Contains(r.Text, "sandbox_list lists") {
		t.Errorf("sandbox_delete of a removed one: %+v", r)
	}
	if r := call("sandbox_list", `{}`); r.Text != "no sandboxes\n" {
		t.Errorf("empty sandbox_list: %q", r.Text)
	}
	if !specs["sandbox_delete"].Annotations.Destructive || !specs["sandbox_list"].Annotations.ReadOnly {
		t.Error("annotations: sandbox_delete is destructive, sandbox_list read-only")
	}
}

func TestFinish(t *testing.T) {
	s := FinishSpec()
	if s.Name != FinishName {
		t.Fatalf("name %q", s.Name)
	}
	r, err := s.Call(context.Background(), json.RawMessage(`{"message": "all tests pass"}`))
	if err != nil || r.IsError || r.Structured.(FinishOutput).Message != "all tests pass" {
		t.Fatalf("finish: %+v %v", r, err)
	}
	if r, _ := s.Call(context.Background(), json.RawMessage(`{}`)); !r.IsError {
		t.Errorf("finish without a message: %+v", r)
	}
	for _, name := range ProfileNames() {
		specs, err := Profile(name, NewShell(nil, ShellOptions{}), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, sp := range specs {
			if sp.Name == FinishName || strings.HasPrefix(sp.Name, "sandbox_") {
				t.Errorf("profile %s serves %s by default", name, sp.Name)
			}
		}
	}
}
