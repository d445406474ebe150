package tool

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestEraseRefusesUnknownFields(t *testing.T) {
	files := newMem(nil)
	specs := Canonical(NewShell(nil, ShellOptions{}), files, nil)
	var ed Spec
	names := map[string]bool{}
	for _, s := range specs {
		if names[s.Name] {
			t.Fatalf("tool %s listed twice", s.Name)
		}
		names[s.Name] = true
		if !json.Valid(s.InputSchema) || !json.Valid(s.OutputSchema) {
			t.Fatalf("%s: a schema is not JSON", s.Name)
		}
		if s.Name == "str_replace_based_edit_tool" {
			ed = s
		}
	}
	r, err := ed.Call(context.Background(), json.RawMessage(`{"command":"create","path":"/a","file_text":"x","bogus":1}`))
	if err != nil || !r.IsError || !strings.Contains(r.Text, "bogus") {
		t.Fatalf("unknown field: %+v %v", r, err)
	}
	r, err = ed.Call(context.Background(), json.RawMessage(`{"command":"create","path":"/a","file_text":"x"}`))
	if err != nil || r.IsError {
		t.Fatalf("create: %+v %v", r, err)
	}
	if _, ok := r.Structured.(EditOutput); !ok {
		t.Fatalf("structured result is %T, want EditOutput", r.Structured)
	}
}
