package tool

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sameSchema checks that served equals the published schema in file,
// whose "$comment" names where it was copied from.
func sameSchema(t *testing.T, served []byte, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var want, got map[string]any
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if want["$comment"] == nil {
		t.Errorf("%s does not name its source in $comment", file)
	}
	delete(want, "$comment")
	if err := json.Unmarshal(served, &got); err != nil {
		t.Fatalf("served schema: %v", err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("served schema differs from %s (-published +served):\n%s", file, d)
	}
}

func TestTextEditorSchema(t *testing.T) {
	tl := NewEditor(0).Tool()
	if tl.Name != "str_replace_based_edit_tool" {
		t.Errorf("name = %q", tl.Name)
	}
	sameSchema(t, tl.InputSchema, "testdata/text_editor_20250728.schema.json")
}

func TestApplyPatchSchema(t *testing.T) {
	tl := ApplyPatch()
	if tl.Name != "apply_patch" {
		t.Errorf("name = %q", tl.Name)
	}
	sameSchema(t, tl.InputSchema, "testdata/codex_apply_patch_function.schema.json")
}

// TestInputFieldsMatchSchema: every property of a served schema decodes
// into the tool's input type, so no field the model sends is dropped.
func TestInputFieldsMatchSchema(t *testing.T) {
	for _, tc := range []struct {
		schema []byte
		into   any
	}{
		{[]byte(textEditorSchema), &EditInput{}},
		{[]byte(applyPatchSchema), &PatchInput{}},
	} {
		var s struct {
			Properties map[string]struct {
				Type string `json:"type"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(tc.schema, &s); err != nil {
			t.Fatal(err)
		}
		for name, p := range s.Properties {
			var v any
			switch p.Type {
			case "string":
				v = "x"
			case "integer":
				v = 1
			case "array":
				v = []int{1, 2}
			}
			b, _ := json.Marshal(map[string]any{name: v})
			if err := json.Unmarshal(b, tc.into); err != nil {
				t.Errorf("%s: %v", name, err)
			}
			back, _ := json.Marshal(tc.into)
			var m map[string]any
			_ = json.Unmarshal(back, &m)
			if _, ok := m[name]; !ok {
				t.Errorf("property %q of the schema is not a field of %T", name, tc.into)
			}
		}
	}
}
