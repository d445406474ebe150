package tool

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/limbs-dev/limbs/internal/wire"
)

// The sandbox tools (sandbox_create, sandbox_list, sandbox_delete) and
// finish.
//
// The sandbox tools let a model make and remove sandboxes of the control
// plane. They are served only when the server was started with that
// permission (limbs mcp --allow-sandboxes, limbs serve
// --mcp-allow-sandboxes): a model that can create sandboxes can use the
// host's resources and remove other sandboxes. The shell and file tools of
// a server keep acting on the sandbox they were started for; a sandbox
// these tools create is reached by another connection.
//
// finish is the tool an agent loop offers so that the model can say it is
// done; it does nothing but hand its message back. It is not served over
// MCP (an MCP client has its own way to end).

// Sandboxes is what the sandbox tools need of the control plane:
// *client.Sandboxes (over HTTP) and *control.Plane (in process) satisfy
// it. Every method takes a sandbox's id or name.
type Sandboxes interface {
	Create(ctx context.Context, req wire.CreateSandbox) (wire.Sandbox, error)
	List(ctx context.Context) ([]wire.Sandbox, error)
	Remove(ctx context.Context, idOrName string) error
}

// SandboxCreateInput is the input of sandbox_create.
type SandboxCreateInput struct {
	Image string `json:"image,omitempty"`
	Name  string `json:"name,omitempty"`
}

// SandboxDeleteInput is the input of sandbox_delete.
type SandboxDeleteInput struct {
	Sandbox string `json:"sandbox"`
}

// SandboxListInput is the input of sandbox_list (no fields).
type SandboxListInput struct{}

// SandboxOutput is the structured result of the sandbox tools: the
// sandbox made or removed, or every sandbox (sandbox_list).
type SandboxOutput struct {
	Action    string         `json:"action"` // create, list, delete
	Sandbox   *wire.Sandbox  `json:"sandbox,omitempty"`
	Sandboxes []wire.Sandbox `json:"sandboxes,omitempty"`
	Deleted   string         `json:"deleted,omitempty"`
}

const sandboxCreateSchema = `{
  "type": "object",
  "properties": {
    "image": {"type": "string", "description": "The container image of the sandbox (default: the control plane's default image)."},
    "name": {"type": "string", "description": "A unique name for the sandbox (optional); the other sandbox tools take it in place of the id."}
  },
  "additionalProperties": false
}`

const sandboxListSchema = `{"type": "object", "properties": {}, "additionalProperties": false}`

const sandboxDeleteSchema = `{
  "type": "object",
  "properties": {
    "sandbox": {"type": "string", "description": "The id or name of the sandbox to remove."}
  },
  "required": ["sandbox"],
  "additionalProperties": false
}`

const (
	sandboxCreateDescription = "Create a new sandbox (an isolated machine with its own files and shells) from a container image, and wait until it is ready. The result names its id. The shell and file tools of this server keep acting on their own sandbox; the new one is for another agent or connection. Remove it with sandbox_delete when it is no longer needed."
	sandboxListDescription   = "List the sandboxes of the control plane: id, name, image, status (creating, running, stopped, failed) and why one failed."
	sandboxDeleteDescription = "Remove a sandbox and everything in it (its files, shells and processes). This cannot be undone."
)

// SandboxTools returns sandbox_create, sandbox_list and sandbox_delete
// over sb.
func SandboxTools(sb Sandboxes) []Spec {
	env := Env{}
	return []Spec{
		Erase(Tool[SandboxCreateInput, SandboxOutput]{Name: "sandbox_create", Description: sandboxCreateDescription, InputSchema: []byte(sandboxCreateSchema),
			Handle: func(ctx context.Context, _ Files, _ string, in SandboxCreateInput) (Result[SandboxOutput], error) {
				s, err := sb.Create(ctx, wire.CreateSandbox{Image: in.Image, Name: in.Name})
				if err != nil {
					return sandboxRefusal[SandboxOutput]("sandbox_create", err)
				}
				text := fmt.Sprintf("created sandbox %s%s from image %s; status %s", s.ID, nameWords(s), s.Image, s.Status)
				if s.Message != "" {
					text += "\n[note: " + oneLine(s.Message) + "]"
				}
				return Result[SandboxOutput]{Text: text + "\n", Out: SandboxOutput{Action: "create", Sandbox: &s}}, nil
			}}, env, objectSchema, Annotations{}),
		Erase(Tool[SandboxListInput, SandboxOutput]{Name: "sandbox_list", Description: sandboxListDescription, InputSchema: []byte(sandboxListSchema),
			Handle: func(ctx context.Context, _ Files, _ string, _ SandboxListInput) (Result[SandboxOutput], error) {
				l, err := sb.List(ctx)
				if err != nil {
					return sandboxRefusal[SandboxOutput]("sandbox_list", err)
				}
				var b strings.Builder
				if len(l) == 0 {
					b.WriteString("no sandboxes\n")
				}
				for _, s := range l {
					fmt.Fprintf(&b, "%s%s  image %s  %s", s.ID, nameWords(s), s.Image, s.Status)
					if s.Reason != "" {
						fmt.Fprintf(&b, " (%s)", oneLine(s.Reason))
					}
					b.WriteByte('\n')
				}
				return Result[SandboxOutput]{Text: b.String(), Out: SandboxOutput{Action: "list", Sandboxes: l}}, nil
			}}, env, objectSchema, Annotations{ReadOnly: true, Idempotent: true}),
		Erase(Tool[SandboxDeleteInput, SandboxOutput]{Name: "sandbox_delete", Description: sandboxDeleteDescription, InputSchema: []byte(sandboxDeleteSchema),
			Handle: func(ctx context.Context, _ Files, _ string, in SandboxDeleteInput) (Result[SandboxOutput], error) {
				if strings.TrimSpace(in.Sandbox) == "" {
					return refusal[SandboxOutput]("sandbox_delete needs \"sandbox\": the id or name of a sandbox (sandbox_list lists them)"), nil
				}
				if err := sb.Remove(ctx, in.Sandbox); err != nil {
					return sandboxRefusal[SandboxOutput]("sandbox_delete", err)
				}
				return Result[SandboxOutput]{Text: fmt.Sprintf("removed sandbox %s\n", in.Sandbox), Out: SandboxOutput{Action: "delete", Deleted: in.Sandbox}}, nil
			}}, env, objectSchema, Annotations{Destructive: true}),
	}
}

// sandboxRefusal turns what the control plane refused (an unknown
// sandbox, a bad image or name, the cap reached) into a refusal the model
// reads; any other error is the call's.
func sandboxRefusal[Out any](name string, err error) (Result[Out], error) {
	switch {
	case errors.Is(err, wire.ErrNotFound):
		return refusal[Out](fmt.Sprintf("%s: %s; sandbox_list lists the sandboxes", name, oneLine(err.Error()))), nil
	case errors.Is(err, wire.ErrBadRequest), errors.Is(err, wire.ErrConflict), errors.Is(err, wire.ErrTooMany):
		return refusal[Out](fmt.Sprintf("%s: %s", name, oneLine(err.Error()))), nil
	}
	return Result[Out]{}, err
}

func nameWords(s wire.Sandbox) string {
	if s.Name == "" || s.Name == s.ID {
		return ""
	}
	return " (" + s.Name + ")"
}

// oneLine keeps a message on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// FinishName is the name of the finish tool.
const FinishName = "finish"

// FinishInput is the input of finish.
type FinishInput struct {
	Message string `json:"message"`
}

// FinishOutput is its structured result: the message, for the loop.
type FinishOutput struct {
	Message string `json:"message"`
}

const finishSchema = `{
  "type": "object",
  "properties": {
    "message": {"type": "string", "description": "What you did and what the result is, for the person who gave you the task."}
  },
  "required": ["message"],
  "additionalProperties": false
}`

const finishDescription = "Call this when the task is done (or cannot be done): message says what you did and what the result is. It ends your turn; nothing runs after it."

// Finish is the finish tool of an agent loop: it hands its message back
// (the loop ends when the model calls it).
func Finish() Tool[FinishInput, FinishOutput] {
	return Tool[FinishInput, FinishOutput]{Name: FinishName, Description: finishDescription, InputSchema: []byte(finishSchema),
		Handle: func(_ context.Context, _ Files, _ string, in FinishInput) (Result[FinishOutput], error) {
			if strings.TrimSpace(in.Message) == "" {
				return refusal[FinishOutput]("finish needs \"message\": say what you did and what the result is"), nil
			}
			return Result[FinishOutput]{Text: "finished\n", Out: FinishOutput(in)}, nil
		}}
}

// FinishSpec is Finish as a Spec, for an agent loop's tool list.
func FinishSpec() Spec {
	return Erase(Finish(), Env{}, objectSchema, Annotations{ReadOnly: true, Idempotent: true})
}
