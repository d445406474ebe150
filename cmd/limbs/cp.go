package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/files"
	"github.com/limbs-dev/limbs/internal/wire"
)

func init() {
	commands["cp"] = command{
		summary: "copy files and directories into or out of a sandbox",
		run:     runCp,
	}
}

func runCp(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("limbs cp", flag.ContinueOnError)
	cn := connectFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: limbs cp [flags] SRC DST

Copies a file or a directory (recursively) between this machine and a
sandbox. Exactly one of SRC and DST is in the sandbox, written :PATH
(the daemon of --addr/--sandbox) or SANDBOX:PATH (that sandbox, through
limbs serve); a sandbox PATH may be relative to its workdir. A local path
with a colon in it needs a ./ in front. - as SRC reads stdin into a sandbox
file; - as DST writes a sandbox file to stdout.

As with cp -r: when DST is an existing directory (or ends in /), SRC goes
inside it under its own name; otherwise SRC becomes DST. Modes are kept,
symlinks inside a directory are copied as symlinks, and an archive from
the sandbox that would write outside DST is refused. What comes out of a
sandbox keeps its permission bits only (no setuid, setgid or sticky bit),
belongs to the user running limbs cp, and is refused when an entry would
be written through a symlink; device nodes and fifos are skipped.

  limbs cp ./app :/workspace/app
  limbs cp :/workspace/app/out.log .
  limbs cp mybox:results ./results
  echo hi | limbs cp - :notes.txt

flags:
`)
		fs.PrintDefaults()
	}
	args, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitUsage
	}
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "limbs cp: need SRC and DST; usage: limbs cp [flags] SRC DST (a sandbox path is :PATH)")
		return exitUsage
	}
	src, dst := parseLoc(args[0]), parseLoc(args[1])
	if src.remote == dst.remote {
		fmt.Fprintln(os.Stderr, "limbs cp: exactly one of SRC and DST must be in the sandbox, written :PATH or SANDBOX:PATH")
		return exitUsage
	}
	if sb := src.sandbox + dst.sandbox; sb != "" {
		cn.sandbox = sb
	}
	cl, err := cn.client()
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs cp: %s\n", safeErr(err))
		return exitLimbsFailed
	}
	if dst.remote {
		err = copyUp(ctx, cl, src.path, dst.path)
	} else {
		err = copyDown(ctx, cl, src.path, dst.path)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs cp: %s\n", safeErr(err))
		return 1
	}
	return 0
}

// parseInterleaved parses flags that may come after positional arguments
// (`limbs cp SRC DST --sandbox x`) and returns the positional ones.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		rest := fs.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil // everything after -- is positional
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

type loc struct {
	remote  bool
	sandbox string
	path    string
}

func parseLoc(arg string) loc {
	if p, ok := strings.CutPrefix(arg, ":"); ok {
		return loc{remote: true, path: remotePath(p)}
	}
	if i := strings.IndexByte(arg, ':'); i > 0 && !strings.ContainsRune(arg[:i], '/') {
		return loc{remote: true, sandbox: arg[:i], path: remotePath(arg[i+1:])}
	}
	return loc{path: arg}
}

func remotePath(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// remoteStat finds what is at p in the sandbox (ok false when nothing).
func remoteStat(ctx context.Context, cl *client.Client, p string) (wire.FileEntry, bool, error) {
	clean := path.Clean(p)
	if clean == "/" || clean == "." {
		return wire.FileEntry{Path: clean, Type: "dir"}, true, nil
	}
	es, err := cl.ListFiles(ctx, path.Dir(clean), 1)
	if errors.Is(err, wire.ErrNotFound) {
		return wire.FileEntry{}, false, nil
	}
	if err != nil {
		return wire.FileEntry{}, false, err
	}
	for _, e := range es {
		if e.Name == path.Base(clean) && e.Path != path.Dir(clean) {
			return e, true, nil
		}
	}
	return wire.FileEntry{}, false, nil
}

// copyUp copies local src (a file, a directory or - for stdin) to remote dst.
func copyUp(ctx context.Context, cl *client.Client, src, dst string) error {
	target := dst
	de, exists, err := remoteStat(ctx, cl, dst)
	if err != nil {
		return err
	}
	if src == "-" {
		if strings.HasSuffix(dst, "/") || exists && de.Type == "dir" {
			return fmt.Errorf("stdin has no name: give a file path as DST, not the directory %s", dst)
		}
		_, err := cl.WriteFile(ctx, dst, os.Stdin, 0, "")
		return err
	}
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if strings.HasSuffix(dst, "/") || exists && de.Type == "dir" {
		target = path.Join(dst, filepath.Base(filepath.Clean(src)))
	}
	if !fi.IsDir() {
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = cl.WriteFile(ctx, target, f, fi.Mode()&(os.ModePerm|os.ModeSetuid|os.ModeSetgid|os.ModeSticky), "")
		return err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(files.WriteTar(pw, src)) }()
	err = cl.PutArchive(ctx, target, pr)
	pr.CloseWithError(errors.New("upload ended"))
	return err
}

// copyDown copies remote src to local dst (a path, or - for stdout).
func copyDown(ctx context.Context, cl *client.Client, src, dst string) error {
	se, exists, err := remoteStat(ctx, cl, src)
	if err != nil {
		return err
	}
	if !exists {
		return fmt.Errorf("%s does not exist in the sandbox: %w", src, wire.ErrNotFound)
	}
	if dst == "-" {
		if se.Type == "dir" {
			return fmt.Errorf("%s is a directory; copy it to a local directory, not to stdout", src)
		}
		rc, err := cl.ReadFile(ctx, src)
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = io.Copy(os.Stdout, rc)
		return err
	}
	target := dst
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() || strings.HasSuffix(dst, "/") {
		target = filepath.Join(dst, path.Base(path.Clean(src)))
	}
	if se.Type == "dir" {
		rc, err := cl.GetArchive(ctx, src)
		if err != nil {
			return err
		}
		defer rc.Close()
		// The archive is the sandbox's: nothing in it is trusted on the
		// host (no set-id bits, no owners, no symlinks followed).
		return files.ExtractTarWith(target, rc, os.TempDir(), files.ExtractOptions{
			Untrusted: true,
			Skipped: func(name, why string) {
				fmt.Fprintf(os.Stderr, "limbs cp: skipped %s: %s\n", safe(name), why)
			},
		})
	}
	rc, err := cl.ReadFile(ctx, src)
	if err != nil {
		return err
	}
	defer rc.Close()
	mode := os.FileMode(0o644)
	if m, err := strconv.ParseUint(se.Mode, 8, 32); err == nil && se.Type == "file" {
		mode = os.FileMode(m) & os.ModePerm
	}
	return writeLocal(target, rc, mode)
}

// writeLocal writes r to p atomically (temp file in the same directory,
// rename), so that a cut download never leaves half a file.
func writeLocal(p string, r io.Reader, mode os.FileMode) error {
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(p)+".limbs-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, r); err != nil {
		tmp.Close()
		return fmt.Errorf("downloading to %s: %w", p, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), mode); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}
