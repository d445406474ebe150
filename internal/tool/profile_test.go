package tool

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/wire"
)

// noSessions fails every session call: the schema test only decodes.
type noSessions struct{ Sessions }

func (noSessions) CreateSession(context.Context, wire.CreateSession) (wire.Session, error) {
	return wire.Session{}, errors.New("no sandbox in this test")
}

// shape is what a schema says a model may send: property names with their
// type, item type and enum; the required ones; whether others are refused.
type shape struct {
	Props      map[string]string
	Required   []string
	Additional any
}

func shapeOf(t *testing.T, what string, b []byte) shape {
	t.Helper()
	var s struct {
		Type       string `json:"type"`
		Properties map[string]struct {
			Type  string   `json:"type"`
			Enum  []string `json:"enum"`
			Items *struct {
				Type string `json:"type"`
			} `json:"items"`
		} `json:"properties"`
		Required   []string `json:"required"`
		Additional any      `json:"additionalProperties"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if s.Type != "object" {
		t.Errorf("%s: type %q, want object", what, s.Type)
	}
	sh := shape{Props: map[string]string{}, Required: append([]string{}, s.Required...), Additional: s.Additional}
	sort.Strings(sh.Required)
	for name, p := range s.Properties {
		d := p.Type
		if p.Items != nil {
			d += " of " + p.Items.Type
		}
		if p.Enum != nil {
			d += " in " + strings.Join(p.Enum, "|")
		}
		sh.Props[name] = d
	}
	return sh
}

// profileSources names, per profile, the published schema each tool is
// checked against.
var profileSources = map[string]map[string]string{
	"anthropic": {
		"bash":                        "testdata/profiles/anthropic_bash_20250124.schema.json",
		"str_replace_based_edit_tool": "testdata/text_editor_20250728.schema.json",
	},
	"codex": {
		"exec_command": "testdata/profiles/codex_exec_command.schema.json",
		"write_stdin":  "testdata/profiles/codex_write_stdin.schema.json",
		"apply_patch":  "testdata/codex_apply_patch_function.schema.json",
	},
	"openhands": {
		"execute_bash":       "testdata/profiles/openhands_execute_bash.schema.json",
		"str_replace_editor": "testdata/profiles/openhands_str_replace_editor.schema.json",
	},
}

// TestProfileSchemas: each profile serves exactly the tools of its
// published sources, with the same properties, types, required
// properties and enums (descriptions may be limbs' own), and every
// property decodes into the tool's input.
func TestProfileSchemas(t *testing.T) {
	for _, name := range ProfileNames()[1:] {
		specs, err := Profile(name, NewShell(noSessions{}, ShellOptions{}), newMem(nil))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range specs {
			got = append(got, s.Name)
			file := profileSources[name][s.Name]
			if file == "" {
				t.Errorf("profile %s serves %s, which has no published source", name, s.Name)
				continue
			}
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var doc map[string]any
			if err := json.Unmarshal(b, &doc); err != nil || doc["$comment"] == nil {
				t.Errorf("%s does not name its source in $comment (%v)", file, err)
			}
			want, served := shapeOf(t, file, b), shapeOf(t, name+"/"+s.Name, s.InputSchema)
			if !reflect.DeepEqual(want, served) {
				t.Errorf("%s/%s: served schema %+v, published (%s) %+v", name, s.Name, served, file, want)
			}
			// Every property decodes (strict, as Erase does): no field a
			// model sends is refused.
			for prop, typ := range served.Props {
				var v any
				switch {
				case strings.Contains(typ, " in "):
					v = strings.Split(strings.SplitN(typ, " in ", 2)[1], "|")[0]
				case typ == "string":
					v = ""
				case typ == "boolean":
					v = false
				case typ == "integer", typ == "number":
					v = 0
				case strings.HasPrefix(typ, "array"):
					v = []int{}
				}
				args, _ := json.Marshal(map[string]any{prop: v})
				r, err := s.Call(context.Background(), args)
				if err == nil && r.IsError && strings.Contains(r.Text, "do not fit its schema") {
					t.Errorf("%s/%s: property %s=%s refused: %s", name, s.Name, prop, args, r.Text)
				}
			}
		}
		var want []string
		for tool := range profileSources[name] {
			want = append(want, tool)
		}
		sort.Strings(want)
		sort.Strings(got)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("profile %s serves %v, want %v", name, got, want)
		}
	}
	if _, err := Profile("gpt", nil, nil); err == nil || !strings.Contains(err.Error(), "default, anthropic, codex, openhands") {
		t.Errorf("unknown profile: %v", err)
	}
}

func TestSplitKeys(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want InputInput
	}{
		{"Ada\n", InputInput{Text: "Ada", Keys: []string{"Enter"}}},
		{"\x03", InputInput{Keys: []string{"C-c"}}},
		{":q!\r", InputInput{Text: ":q!", Keys: []string{"Enter"}}},
		{"a\nb", InputInput{Text: "a\nb"}},
		{"\x18\x03", InputInput{Keys: []string{"C-x", "C-c"}}},
	} {
		if got := splitKeys(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("splitKeys(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
	if got := lineInput("y", false); !reflect.DeepEqual(got, InputInput{Text: "y", Keys: []string{"Enter"}}) {
		t.Errorf("line prompt: %+v", got)
	}
	if got := lineInput("q", true); !reflect.DeepEqual(got, InputInput{Text: "q"}) {
		t.Errorf("screen: %+v", got)
	}
	if got := lineInput("C-c", false); !reflect.DeepEqual(got, InputInput{Keys: []string{"C-c"}}) {
		t.Errorf("key: %+v", got)
	}
	if got := rawChars(InputInput{Text: ":q!", Keys: []string{"Enter"}}); got != ":q!\n" {
		t.Errorf("rawChars = %q", got)
	}
}

// TestOpenHandsEditor: str_replace_editor maps OpenHands' parameters onto
// the Editor: insert takes new_str, undo_edit reverts, security_risk is
// accepted, and an unknown command names this tool.
func TestOpenHandsEditor(t *testing.T) {
	files := newMem(nil)
	specs, err := Profile("openhands", NewShell(noSessions{}, ShellOptions{}), files)
	if err != nil {
		t.Fatal(err)
	}
	var ed Spec
	for _, s := range specs {
		if s.Name == "str_replace_editor" {
			ed = s
		}
	}
	call := func(args string) CallResult {
		t.Helper()
		r, err := ed.Call(context.Background(), json.RawMessage(args))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := call(`{"command": "create", "path": "/w/a.txt", "file_text": "one\n\tthree\n", "security_risk": "LOW"}`); r.IsError {
		t.Fatal(r.Text)
	}
	if r := call(`{"command": "insert", "path": "/w/a.txt", "insert_line": 1, "new_str": "two", "security_risk": "LOW"}`); r.IsError {
		t.Fatal(r.Text)
	}
	if got, _ := files.get("/w/a.txt"); got != "one\ntwo\n\tthree\n" {
		t.Fatalf("after insert: %q", got)
	}
	if r := call(`{"command": "undo_edit", "path": "/w/a.txt", "security_risk": "LOW"}`); r.IsError || !strings.Contains(r.Text, "undone") {
		t.Fatal(r.Text)
	}
	if got, _ := files.get("/w/a.txt"); got != "one\n\tthree\n" {
		t.Fatalf("after undo: %q", got)
	}
	if r := call(`{"command": "delete", "path": "/w/a.txt", "security_risk": "LOW"}`); !r.IsError || !strings.Contains(r.Text, "str_replace_editor tool") {
		t.Fatalf("unknown command: %+v", r)
	}
}
