package tool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/limbs-dev/limbs/internal/wire"
)

// PatchInput is the input of apply_patch in the Codex function form.
type PatchInput struct {
	Input string `json:"input"`
}

// PatchOutput is the structured result of apply_patch.
type PatchOutput struct {
	// Files are the files the patch changed, in the order it names them.
	Files []PatchedFile `json:"files,omitempty"`
	// Failed names the file and hunk that did not apply (refusals only).
	Failed *PatchFailure `json:"failed,omitempty"`
}

// PatchedFile is one file a patch changed.
type PatchedFile struct {
	Path   string `json:"path"`           // absolute
	Action string `json:"action"`         // added, deleted, updated, moved
	From   string `json:"from,omitempty"` // a moved file's old path
	ETag   string `json:"etag,omitempty"` // sha256 after the patch
}

// PatchFailure locates a hunk that did not apply.
type PatchFailure struct {
	Path      string `json:"path"`
	Hunk      int    `json:"hunk,omitempty"`       // 1-based within its file
	PatchLine int    `json:"patch_line,omitempty"` // where it starts in the patch
	// NearestLine is the file line most like what the hunk looked for.
	NearestLine int `json:"nearest_line,omitempty"`
}

// ApplyPatch describes apply_patch in the Codex function form.
func ApplyPatch() Tool[PatchInput, PatchOutput] {
	return Tool[PatchInput, PatchOutput]{
		Name:        "apply_patch",
		Description: applyPatchDescription,
		InputSchema: []byte(applyPatchSchema),
		Handle:      RunApplyPatch,
	}
}

const applyPatchDescription = `Use the ` + "`apply_patch`" + ` tool to edit files. The patch is a file-oriented diff:

*** Begin Patch
*** Add File: <path>       (every following line starts with + : the new file)
*** Delete File: <path>
*** Update File: <path>
*** Move to: <new path>    (optional, right after Update File: also renames)
@@ <a line naming the class or function, optional>
 context line (starts with a space)
-removed line
+added line
*** End of File            (optional: the hunk ends the file)
*** End Patch

Show about 3 lines of context above and below each change; add "@@ <scope>" lines when that is not unique. Paths are relative to the working directory. The patch applies whole or not at all: if any hunk does not apply, no file is changed.`

// vfile is one file as the patch sees it: what was read, and what the
// patch has made of it so far.
type vfile struct {
	path       string // absolute
	orig       []byte
	origETag   string
	origExists bool
	data       []byte
	exists     bool
	mode       fs.FileMode // for a write that must set it (a move); 0 keeps
}

// patchRun is one apply_patch call: the files read, in the order first named.
type patchRun struct {
	ctx   context.Context
	f     Files
	cwd   string
	files map[string]*vfile
	order []string
}

// RunApplyPatch applies one patch: it reads every file the patch names,
// computes every result, and only then writes, each write carrying the
// etag that was read (If-Match), so that a file changed meanwhile fails the
// patch; if a write fails, what was already written is put back.
func RunApplyPatch(ctx context.Context, f Files, cwd string, in PatchInput) (Result[PatchOutput], error) {
	p, err := ParsePatch(in.Input)
	if err != nil {
		return refusal[PatchOutput](err.Error() + "\nNothing was written. Fix the patch and send it again."), nil
	}
	if len(p.Ops) == 0 {
		return refusal[PatchOutput]("The patch names no files: nothing was changed. Add '*** Add File:', '*** Delete File:' or '*** Update File:' sections between the Begin and End lines."), nil
	}
	run := &patchRun{ctx: ctx, f: f, cwd: cwd, files: map[string]*vfile{}}
	var summary []string
	var out PatchOutput
	for _, op := range p.Ops {
		r, line, err := run.apply(op)
		if err != nil || r != nil {
			if r != nil {
				r.Text += "\nNothing was written: the patch applies whole or not at all."
				return *r, nil
			}
			return Result[PatchOutput]{}, err
		}
		summary = append(summary, line)
	}
	written, res, err := run.commit()
	if res != nil || err != nil {
		if res != nil {
			return *res, nil
		}
		return Result[PatchOutput]{}, err
	}
	for _, op := range p.Ops {
		pf := PatchedFile{Path: resolve(cwd, op.Path)}
		switch {
		case op.Kind == OpAdd:
			pf.Action = "added"
		case op.Kind == OpDelete:
			pf.Action = "deleted"
		case op.MoveTo != "":
			pf.Action, pf.From, pf.Path = "moved", pf.Path, resolve(cwd, op.MoveTo)
		default:
			pf.Action = "updated"
		}
		pf.ETag = written[pf.Path]
		out.Files = append(out.Files, pf)
	}
	return Result[PatchOutput]{Text: "Success. Updated the following files:\n" + strings.Join(summary, "\n") + "\n", Out: out}, nil
}

// load reads p once per patch.
func (r *patchRun) load(p string) (*vfile, *Result[PatchOutput], error) {
	if v, ok := r.files[p]; ok {
		return v, nil, nil
	}
	v := &vfile{path: p}
	data, etag, err := r.f.ReadFile(r.ctx, p)
	switch {
	case err == nil:
		v.orig, v.origETag, v.origExists = data, etag, true
		v.data, v.exists = data, true
	case errors.Is(err, wire.ErrNotFound):
	case errors.Is(err, wire.ErrBadRequest), errors.Is(err, wire.ErrTooLarge):
		what := "cannot be read as a file"
		if st, serr := r.f.Stat(r.ctx, p); serr == nil && st.Type == "dir" {
			what = "is a directory"
		}
		res := refusal[PatchOutput](fmt.Sprintf("%s %s (%s).", p, what, detail(err)))
		return nil, &res, nil
	default:
		return nil, nil, fmt.Errorf("reading %s: %w", p, err)
	}
	r.files[p] = v
	r.order = append(r.order, p)
	return v, nil, nil
}

// apply carries out op on the files in memory and returns its summary line
// (as Codex prints it: A, D or M and the path as the patch wrote it).
func (r *patchRun) apply(op FileOp) (*Result[PatchOutput], string, error) {
	p := resolve(r.cwd, op.Path)
	if op.Path == "" {
		res := refusal[PatchOutput](fmt.Sprintf("The section at patch line %d names no file.", op.Line))
		return &res, "", nil
	}
	v, res, err := r.load(p)
	if res != nil || err != nil {
		return res, "", err
	}
	switch op.Kind {
	case OpAdd:
		if v.exists {
			res := refusal[PatchOutput](fmt.Sprintf("*** Add File: %s: the file already exists (%s). Use '*** Update File:' to change it, or '*** Delete File:' it first.", op.Path, p))
			res.Out.Failed = &PatchFailure{Path: p}
			return &res, "", nil
		}
		v.data, v.exists = []byte(op.Contents), true
		return nil, "A " + op.Path, nil
	case OpDelete:
		if !v.exists {
			res := refusal[PatchOutput](fmt.Sprintf("*** Delete File: %s: there is no file at %s to delete.", op.Path, p))
			res.Out.Failed = &PatchFailure{Path: p}
			return &res, "", nil
		}
		v.data, v.exists = nil, false
		return nil, "D " + op.Path, nil
	}
	if !v.exists {
		res := refusal[PatchOutput](fmt.Sprintf("*** Update File: %s: there is no file at %s. Use '*** Add File:' to create it.", op.Path, p))
		res.Out.Failed = &PatchFailure{Path: p}
		return &res, "", nil
	}
	if msg := checkText(p, v.data); msg != "" {
		res := refusal[PatchOutput](msg)
		return &res, "", nil
	}
	updated, fail := applyHunks(string(v.data), op)
	if fail != nil {
		fail.Path = p
		res := refusal[PatchOutput](fail.text)
		res.Out.Failed = &fail.PatchFailure
		return &res, "", nil
	}
	if op.MoveTo == "" {
		v.data = []byte(updated)
		return nil, "M " + op.Path, nil
	}
	dp := resolve(r.cwd, op.MoveTo)
	d, res, err := r.load(dp)
	if res != nil || err != nil {
		return res, "", err
	}
	if d != v {
		mode := fs.FileMode(0)
		if v.origExists {
			if st, err := r.f.Stat(r.ctx, p); err == nil {
				if m, err := strconv.ParseUint(st.Mode, 8, 32); err == nil {
					mode = fs.FileMode(m).Perm()
				}
			}
		}
		v.data, v.exists = nil, false
		d.mode = mode
	}
	d.data, d.exists = []byte(updated), true
	return nil, "M " + op.MoveTo, nil
}

// step is one change commit made, kept to put it back.
type step struct {
	v       *vfile
	deleted bool
	etag    string // after a write
}

// commit writes what the patch computed: writes first (a move's new file
// exists before its old one goes), then deletes. It returns the etag of
// every file written.
func (r *patchRun) commit() (map[string]string, *Result[PatchOutput], error) {
	var writes, deletes []*vfile
	for _, p := range r.order {
		v := r.files[p]
		switch {
		case v.exists && (!v.origExists || !bytes.Equal(v.data, v.orig) || v.mode != 0):
			writes = append(writes, v)
		case !v.exists && v.origExists:
			deletes = append(deletes, v)
		}
	}
	written := map[string]string{}
	var done []step
	fail := func(v *vfile, err error) (map[string]string, *Result[PatchOutput], error) {
		why := detail(err)
		if errors.Is(err, wire.ErrConflict) {
			why = "it changed after the patch read it (another program wrote it)"
		}
		lost := r.rollback(done)
		text := fmt.Sprintf("The patch was not applied: writing %s failed: %s.", v.path, why)
		if len(lost) == 0 {
			text += " What it had already written was put back, so no file changed. Read the files again and send the patch again."
		} else {
			text += " Putting back what it had already written failed for " + strings.Join(lost, ", ") + ": look at those files before going on."
		}
		if errors.Is(err, wire.ErrConflict) || errors.Is(err, wire.ErrBadRequest) || errors.Is(err, wire.ErrNotFound) {
			res := refusal[PatchOutput](text)
			res.Out.Failed = &PatchFailure{Path: v.path}
			return nil, &res, nil
		}
		return nil, nil, errors.New(text + " (" + err.Error() + ")")
	}
	for _, v := range writes {
		if !v.origExists {
			// No If-Match can say "must not exist": check just before.
			if _, err := r.f.Stat(r.ctx, v.path); err == nil {
				return fail(v, fmt.Errorf("a file appeared there after the patch looked: %w", wire.ErrConflict))
			} else if !errors.Is(err, wire.ErrNotFound) {
				return fail(v, err)
			}
		}
		etag, err := r.f.WriteFile(r.ctx, v.path, v.data, v.mode, v.origETag)
		if err != nil {
			return fail(v, err)
		}
		done = append(done, step{v: v, etag: etag})
		written[v.path] = etag
	}
	for _, v := range deletes {
		// DELETE takes no If-Match: compare the etag just before.
		_, cur, err := r.f.ReadFile(r.ctx, v.path)
		if err == nil && cur != v.origETag {
			err = fmt.Errorf("it changed after the patch read it: %w", wire.ErrConflict)
		}
		if err == nil {
			if st, serr := r.f.Stat(r.ctx, v.path); serr == nil {
				if m, perr := strconv.ParseUint(st.Mode, 8, 32); perr == nil {
					v.mode = fs.FileMode(m).Perm()
				}
			}
			err = r.f.DeleteFile(r.ctx, v.path)
		}
		if err != nil {
			return fail(v, err)
		}
		done = append(done, step{v: v, deleted: true})
	}
	return written, nil, nil
}

// rollback undoes done, newest first, and returns the paths it could not
// restore. It uses a fresh context: the call's may be what failed.
func (r *patchRun) rollback(done []step) []string {
	ctx := context.WithoutCancel(r.ctx)
	var lost []string
	for i := len(done) - 1; i >= 0; i-- {
		s := done[i]
		var err error
		switch {
		case s.deleted:
			_, err = r.f.WriteFile(ctx, s.v.path, s.v.orig, s.v.mode, "")
		case !s.v.origExists:
			if _, cur, rerr := r.f.ReadFile(ctx, s.v.path); rerr != nil || cur != s.etag {
				err = fmt.Errorf("changed again: %w", wire.ErrConflict)
			} else {
				err = r.f.DeleteFile(ctx, s.v.path)
			}
		default:
			_, err = r.f.WriteFile(ctx, s.v.path, s.v.orig, 0, s.etag)
		}
		if err != nil {
			lost = append(lost, s.v.path)
		}
	}
	sort.Strings(lost)
	return lost
}
