package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/limbs-dev/limbs/internal/wire"
)

func init() {
	commands["edit"] = command{
		summary: "view and edit sandbox files the way agents do (str_replace_editor)",
		run:     runEdit,
	}
}

// textFlag is a string flag that may name a file to read it from
// (@file, or @- for stdin), since edit text is often several lines.
type textFlag struct {
	set bool
	val string
}

func (f *textFlag) String() string { return f.val }
func (f *textFlag) Set(v string) error {
	f.set = true
	f.val = v
	return nil
}

func (f *textFlag) text(stdin io.Reader) (*string, error) {
	if !f.set {
		return nil, nil
	}
	v := f.val
	if name, ok := strings.CutPrefix(v, "@"); ok {
		var b []byte
		var err error
		if name == "-" {
			b, err = io.ReadAll(stdin)
		} else {
			b, err = os.ReadFile(name)
		}
		if err != nil {
			return nil, err
		}
		v = string(b)
	}
	return &v, nil
}

func runEdit(ctx context.Context, args []string) int {
	return editMain(ctx, args, os.Stdin, os.Stdout, os.Stderr)
}

func editMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("limbs edit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cn := connectFlags(fs)
	var fileText, oldStr, newStr textFlag
	fs.Var(&fileText, "text", "create: the file's content (@FILE reads it from FILE, @- from stdin; default: stdin)")
	fs.Var(&oldStr, "old", "str_replace: the exact text to replace, once (@FILE or @- to read it)")
	fs.Var(&newStr, "new", "str_replace, insert: the new text (@FILE or @- to read it)")
	line := fs.Int("line", -1, "insert: the line after which new text goes (0: the top)")
	rng := fs.String("range", "", "view: lines START:END (END -1 for the end of the file)")
	ifMatch := fs.String("if-match", "", "change the file only if its sha256 is still this")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: limbs edit [flags] COMMAND PATH

The file editor agents use, on a sandbox's files (PATH is absolute or
relative to the sandbox's workdir):

  view PATH [--range 10:40]          numbered lines; a directory, 2 levels deep
  create PATH [--text T]             a new file (content from stdin by default)
  str_replace PATH --old X --new Y   replace X, which must occur exactly once
  insert PATH --line N --new Y       add Y after line N (0: at the top)
  undo_edit PATH                     revert the last edit of PATH

Prints what the agent would see. A refusal (no match, bad line, ...) is
printed on stderr with exit code 1.

flags:
`)
		fs.PrintDefaults()
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	if len(pos) != 2 {
		fmt.Fprintln(stderr, "limbs edit: need COMMAND and PATH; usage: limbs edit [flags] view|create|str_replace|insert|undo_edit PATH")
		return exitUsage
	}
	req := wire.Edit{Command: pos[0], Path: pos[1], IfMatch: *ifMatch}
	if req.Command == "undo" {
		req.Command = "undo_edit"
	}
	if req.Command == "create" && !fileText.set {
		fileText = textFlag{set: true, val: "@-"}
	}
	for _, t := range []struct {
		f   *textFlag
		dst **string
	}{{&fileText, &req.FileText}, {&oldStr, &req.OldStr}, {&newStr, &req.NewStr}} {
		if *t.dst, err = t.f.text(stdin); err != nil {
			fmt.Fprintf(stderr, "limbs edit: %s\n", safeErr(err))
			return exitUsage
		}
	}
	if *line >= 0 {
		req.InsertLine = line
	}
	if *rng != "" {
		a, b, ok := strings.Cut(*rng, ":")
		start, err1 := strconv.Atoi(a)
		end, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil {
			fmt.Fprintf(stderr, "limbs edit: --range %q is not START:END, such as 10:40 or 10:-1\n", *rng)
			return exitUsage
		}
		req.ViewRange = []int{start, end}
	}
	cl, err := cn.client()
	if err != nil {
		fmt.Fprintf(stderr, "limbs edit: %s\n", safeErr(err))
		return exitLimbsFailed
	}
	out, err := cl.Edit(ctx, req)
	var re *wire.RemoteError
	switch {
	case err == nil:
		fmt.Fprint(stdout, out)
		if !strings.HasSuffix(out, "\n") {
			fmt.Fprintln(stdout)
		}
		return 0
	case errors.As(err, &re) && (errors.Is(err, wire.ErrBadRequest) || errors.Is(err, wire.ErrConflict) || errors.Is(err, wire.ErrTooLarge)):
		fmt.Fprintln(stderr, safe(re.Message))
		return 1
	default:
		fmt.Fprintf(stderr, "limbs edit: %s\n", safeErr(err))
		return exitLimbsFailed
	}
}
