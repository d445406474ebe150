package tool

import (
	"encoding/json"
	"testing"
)

// TestShellSchemas: every property of each shell tool's schema decodes
// into the tool's input type and comes back out (no field the model sends
// is dropped), every required property exists, and the names are the
// canonical ones.
func TestShellSchemas(t *testing.T) {
	sh := NewShell(nil, ShellOptions{})
	for _, tc := range []struct {
		name, want string
		schema     []byte
		into       any
	}{
		{sh.RunTool().Name, "shell_run", sh.RunTool().InputSchema, &RunInput{}},
		{sh.InputTool().Name, "shell_input", sh.InputTool().InputSchema, &InputInput{}},
		{sh.WaitTool().Name, "shell_wait", sh.WaitTool().InputSchema, &WaitInput{}},
		{sh.ReadTool().Name, "shell_read", sh.ReadTool().InputSchema, &ReadInput{}},
		{sh.ScreenTool().Name, "shell_screen", sh.ScreenTool().InputSchema, &ScreenInput{}},
		{sh.SessionTool().Name, "session", sh.SessionTool().InputSchema, &SessionInput{}},
	} {
		if tc.name != tc.want {
			t.Errorf("name %q, want %q", tc.name, tc.want)
		}
		var s struct {
			Properties map[string]struct {
				Type string `json:"type"`
				Enum []string
			} `json:"properties"`
			Required []string `json:"required"`
		}
		if err := json.Unmarshal(tc.schema, &s); err != nil {
			t.Fatalf("%s: %v", tc.want, err)
		}
		for _, r := range s.Required {
			if _, ok := s.Properties[r]; !ok {
				t.Errorf("%s: required %q is not a property", tc.want, r)
			}
		}
		for name, p := range s.Properties {
			var v any
			switch p.Type {
			case "string":
				v = "x"
			case "integer":
				v = 7
			case "number":
				v = 1.5
			case "array":
				v = []string{"a"}
			case "object":
				v = map[string]any{"port": 8000}
			default:
				t.Errorf("%s.%s: type %q", tc.want, name, p.Type)
			}
			b, _ := json.Marshal(map[string]any{name: v})
			if err := json.Unmarshal(b, tc.into); err != nil {
				t.Errorf("%s.%s: %v", tc.want, name, err)
			}
			back, _ := json.Marshal(tc.into)
			var m map[string]any
			_ = json.Unmarshal(back, &m)
			if _, ok := m[name]; !ok {
				t.Errorf("property %q of %s is not a field of %T", name, tc.want, tc.into)
			}
		}
	}
}
