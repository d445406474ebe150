package tool

import (
	"context"
	"fmt"
	"strings"

	"github.com/limbs-dev/limbs/internal/wire"
)

// The checkpoint tools (checkpoint, rollback) let a model save its
// sandbox's files and sessions before a risky step and go back to them
// (docs/checkpoints.md). They need the control plane: they are served
// for a sandbox of limbs serve, in every profile, and act on that
// sandbox only.

// Checkpointer is what the checkpoint tools need of the control plane:
// *client.Sandboxes and *control.Plane (through an adapter) satisfy it.
type Checkpointer interface {
	Checkpoint(ctx context.Context, idOrName string, req wire.CreateCheckpoint) (wire.Checkpoint, error)
	Checkpoints(ctx context.Context, idOrName string) ([]wire.Checkpoint, error)
	Restore(ctx context.Context, idOrName, cp string) (wire.Restored, error)
}

// CheckpointInput is the input of checkpoint.
type CheckpointInput struct {
	Name string `json:"name,omitempty"`
}

// RollbackInput is the input of rollback.
type RollbackInput struct {
	Checkpoint string `json:"checkpoint,omitempty"`
}

// CheckpointOutput is the structured result of both tools.
type CheckpointOutput struct {
	Action     string          `json:"action"` // checkpoint, rollback
	Checkpoint wire.Checkpoint `json:"checkpoint,omitzero"`
	Restored   *wire.Restored  `json:"restored,omitempty"`
}

const checkpointSchema = `{
  "type": "object",
  "properties": {
    "name": {"type": "string", "description": "A short name saying what state this is (optional), e.g. \"tests pass\"; rollback takes it in place of the id."}
  },
  "additionalProperties": false
}`

const rollbackSchema = `{
  "type": "object",
  "properties": {
    "checkpoint": {"type": "string", "description": "The id or name of the checkpoint to go back to (default: the newest)."}
  },
  "additionalProperties": false
}`

const (
	checkpointDescription = "Save the sandbox's files (the workspace: contents, modes, symlinks) and each shell's working directory and exported variables, so that rollback can bring them back. Running programs are not saved. Take one before a risky change."
	rollbackDescription   = "Put the sandbox's files back exactly as a checkpoint saved them (files made since are deleted, deleted ones come back) and restart the shells in the saved working directory and variables; programs running in them are stopped."
)

// CheckpointTools returns checkpoint and rollback over c for sandbox.
func CheckpointTools(c Checkpointer, sandbox string) []Spec {
	env := Env{}
	return []Spec{
		Erase(Tool[CheckpointInput, CheckpointOutput]{Name: "checkpoint", Description: checkpointDescription, InputSchema: []byte(checkpointSchema),
			Handle: func(ctx context.Context, _ Files, _ string, in CheckpointInput) (Result[CheckpointOutput], error) {
				cp, err := c.Checkpoint(ctx, sandbox, wire.CreateCheckpoint{Name: strings.TrimSpace(in.Name)})
				if err != nil {
					return sandboxRefusal[CheckpointOutput]("checkpoint", err)
				}
				text := fmt.Sprintf("saved checkpoint %s%s: %d files, %d bytes\n", cp.ID, quotedName(cp.Name), cp.Files, cp.Size)
				return Result[CheckpointOutput]{Text: text, Out: CheckpointOutput{Action: "checkpoint", Checkpoint: cp}}, nil
			}}, env, objectSchema, Annotations{}),
		Erase(Tool[RollbackInput, CheckpointOutput]{Name: "rollback", Description: rollbackDescription, InputSchema: []byte(rollbackSchema),
			Handle: func(ctx context.Context, _ Files, _ string, in RollbackInput) (Result[CheckpointOutput], error) {
				list, err := c.Checkpoints(ctx, sandbox)
				if err != nil {
					return sandboxRefusal[CheckpointOutput]("rollback", err)
				}
				want := strings.TrimSpace(in.Checkpoint)
				var cp *wire.Checkpoint
				for i := len(list) - 1; i >= 0; i-- {
					if want == "" || list[i].ID == want || list[i].Name == want {
						cp = &list[i]
						break
					}
				}
				if cp == nil {
					if want == "" {
						return refusal[CheckpointOutput]("rollback: there is no checkpoint yet; save one with the checkpoint tool first"), nil
					}
					return refusal[CheckpointOutput](fmt.Sprintf("rollback: no checkpoint %q; the checkpoints are: %s", want, checkpointNames(list))), nil
				}
				res, err := c.Restore(ctx, sandbox, cp.ID)
				if err != nil {
					return sandboxRefusal[CheckpointOutput]("rollback", err)
				}
				text := fmt.Sprintf("rolled back to checkpoint %s%s: %d paths written, %d removed; the shells were restarted in their saved directories\n", cp.ID, quotedName(cp.Name), res.Written, res.Removed)
				return Result[CheckpointOutput]{Text: text, Out: CheckpointOutput{Action: "rollback", Checkpoint: *cp, Restored: &res}}, nil
			}}, env, objectSchema, Annotations{Destructive: true}),
	}
}

func quotedName(n string) string {
	if n == "" {
		return ""
	}
	return fmt.Sprintf(" (%q)", n)
}

func checkpointNames(list []wire.Checkpoint) string {
	if len(list) == 0 {
		return "none"
	}
	var b []string
	for _, cp := range list {
		b = append(b, cp.ID+quotedName(cp.Name))
	}
	return strings.Join(b, ", ")
}
