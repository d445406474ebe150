package main

import (
	"archive/tar"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

func init() {
	commands["snapshot"] = command{summary: "export a Docker sandbox (its container and its workspace) as an image", run: runSnapshot}
}

func runSnapshot(ctx context.Context, args []string) int {
	return exitCode("snapshot", snapshotVerb(ctx, args))
}

// The labels limbs puts on a sandbox's container, which docker commit
// would copy into the image: they are emptied, so that no container of the
// image passes for a sandbox of some limbs serve.
var snapshotLabels = []string{"limbs.managed", "limbs.instance", "limbs.sandbox", "limbs.name", "limbs.workspace-volume", "limbs.socket-dir"}

func snapshotVerb(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("limbs snapshot", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: limbs snapshot SANDBOX --image NAME[:TAG]

Exports a sandbox of the docker provider as an image that can be pushed
to a registry: docker commit of its container (which leaves the
workspace volume out), then a layer adding the workspace as limbsd
archives it now (GET .../files/archive?path=/workspace: modes and
symlinks kept). Runs the docker CLI on this machine, which must reach
the engine limbs serve uses. The result runs as a limbs sandbox image
(limbs sandbox create --image NAME) or with docker run.

flags:
`)
		fs.PrintDefaults()
	}
	cc := controlFlags(fs)
	image := fs.String("image", "", "the image to write, NAME[:TAG]")
	workspace := fs.String("workspace", "/workspace", "the sandbox's workspace path")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 || *image == "" {
		return usageError{"usage: limbs snapshot SANDBOX --image NAME[:TAG]"}
	}
	if strings.HasPrefix(*image, "-") || strings.ContainsAny(*image, " \n\t") {
		return usageError{fmt.Sprintf("--image %q is not an image name", *image)}
	}
	sbs, err := cc.client()
	if err != nil {
		return err
	}
	sb, err := sbs.Get(ctx, fs.Arg(0))
	if err != nil {
		return err
	}
	if sb.Provider != "docker" {
		return fmt.Errorf("sandbox %s is a %s sandbox: only a docker sandbox has a container to commit", safe(sb.ID), safe(sb.Provider))
	}
	container := "limbs-" + sb.ID
	start := time.Now()
	// The workspace first: the archive is what the image will hold.
	rd, err := sbs.Client().Sandbox(sb.ID).GetArchive(ctx, *workspace)
	if err != nil {
		return fmt.Errorf("archiving %s of %s: %w", *workspace, sb.ID, err)
	}
	ws, err := os.CreateTemp("", "limbs-snapshot-*.tar")
	if err != nil {
		rd.Close()
		return err
	}
	defer os.Remove(ws.Name())
	defer ws.Close()
	_, err = io.Copy(ws, rd)
	rd.Close()
	if err != nil {
		return fmt.Errorf("archiving %s of %s: %w", *workspace, sb.ID, err)
	}
	commit := []string{"commit"}
	for _, l := range snapshotLabels {
		commit = append(commit, "--change", "LABEL "+l+"=")
	}
	commit = append(commit, container)
	out, err := exec.CommandContext(ctx, "docker", commit...).Output()
	if err != nil {
		return fmt.Errorf("docker commit %s: %v: %s", container, err, stderrOf(err))
	}
	base := strings.TrimSpace(string(out))
	// The build context: a Dockerfile and the workspace's tar, which ADD
	// unpacks into the workspace.
	fi, err := ws.Stat()
	if err != nil {
		return err
	}
	if _, err := ws.Seek(0, io.SeekStart); err != nil {
		return err
	}
	dockerfile := fmt.Sprintf("FROM %s\nADD workspace.tar %s/\n", base, strings.TrimSuffix(*workspace, "/"))
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile)), ModTime: time.Now()})
		if err == nil {
			_, err = tw.Write([]byte(dockerfile))
		}
		if err == nil {
			err = tw.WriteHeader(&tar.Header{Name: "workspace.tar", Mode: 0o644, Size: fi.Size(), ModTime: time.Now()})
		}
		if err == nil {
			_, err = io.Copy(tw, ws)
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	build := exec.CommandContext(ctx, "docker", "build", "-q", "-t", *image, "-")
	build.Stdin = pr
	var stderr bytes.Buffer
	build.Stderr = &stderr
	out, err = build.Output()
	pr.Close()
	if err != nil {
		return fmt.Errorf("docker build of %s: %v: %s", *image, err, strings.TrimSpace(stderr.String()))
	}
	fmt.Printf("%s\t%s\t%s of workspace\t%d ms\n", safe(*image), safe(strings.TrimSpace(string(out))), humanBytes(fi.Size()), time.Since(start).Milliseconds())
	return nil
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}
