package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// Annotations are hints about a tool for the client (MCP tool
// annotations): whether it only reads, whether it may destroy data.
type Annotations struct {
	ReadOnly    bool
	Destructive bool
	Idempotent  bool
}

// Spec is a tool with its types erased, as a server lists and calls it:
// the MCP server and the agent loop take these, whatever the profile.
type Spec struct {
	Name        string
	Description string
	// InputSchema and OutputSchema are JSON Schemas (objects). The output
	// schema describes CallResult.Structured.
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage
	Annotations  Annotations
	// Call decodes args (a JSON object; null or empty is {}) and runs the
	// tool. A refusal the model can act on is a CallResult with IsError;
	// an error means the call could not be carried out.
	Call func(ctx context.Context, args json.RawMessage) (CallResult, error)
}

// CallResult is one call's answer: Text for the model, Structured the same
// facts for programs (MCP structuredContent).
type CallResult struct {
	Text       string
	Structured any
	IsError    bool
}

// Env is what the erased tools run against: the sandbox's files, and the
// directory relative paths resolve from (the default session's cwd).
type Env struct {
	Files Files
	Cwd   func() string
}

// Erase makes a Spec of t: arguments are decoded strictly (an unknown
// field is a refusal that names it, so a model learns the schema from the
// answer).
func Erase[In, Out any](t Tool[In, Out], env Env, out json.RawMessage, a Annotations) Spec {
	return Spec{
		Name:         t.Name,
		Description:  t.Description,
		InputSchema:  t.InputSchema,
		OutputSchema: out,
		Annotations:  a,
		Call: func(ctx context.Context, args json.RawMessage) (CallResult, error) {
			var in In
			if s := strings.TrimSpace(string(args)); s != "" && s != "null" {
				dec := json.NewDecoder(strings.NewReader(s))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&in); err != nil {
					return CallResult{Text: fmt.Sprintf("%s: the arguments do not fit its schema: %v; call it again with the fields its input schema lists", t.Name, err), IsError: true}, nil
				}
			}
			cwd := ""
			if env.Cwd != nil {
				cwd = env.Cwd()
			}
			r, err := t.Handle(ctx, env.Files, cwd, in)
			if err != nil {
				return CallResult{}, err
			}
			return CallResult{Text: r.Text, Structured: r.Out, IsError: r.IsError}, nil
		},
	}
}

// objectSchema is the output schema of a tool whose structured result is
// described in its documentation rather than field by field.
var objectSchema = json.RawMessage(`{"type":"object"}`)

// Canonical is the default profile: the shell tools of sh, the text
// editor and apply_patch against files, with relative paths resolved from
// the default session's cwd.
func Canonical(sh *Shell, files Files, ed *Editor) []Spec {
	env := Env{Files: files, Cwd: sh.Cwd}
	if ed == nil {
		ed = NewEditor(0)
	}
	return []Spec{
		Erase(sh.RunTool(), env, objectSchema, Annotations{Destructive: true}),
		Erase(sh.InputTool(), env, objectSchema, Annotations{Destructive: true}),
		Erase(sh.WaitTool(), env, objectSchema, Annotations{ReadOnly: true}),
		Erase(sh.ReadTool(), env, objectSchema, Annotations{ReadOnly: true, Idempotent: true}),
		Erase(sh.ScreenTool(), env, objectSchema, Annotations{ReadOnly: true, Idempotent: true}),
		Erase(sh.SessionTool(), env, objectSchema, Annotations{Destructive: true}),
		Erase(ed.Tool(), env, objectSchema, Annotations{Destructive: true}),
		Erase(ApplyPatch(), env, objectSchema, Annotations{Destructive: true}),
	}
}
