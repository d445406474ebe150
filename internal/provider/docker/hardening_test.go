package docker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/client"

	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/wire"
)

// TestDefaultSandboxHardening is acceptance 2: what `docker inspect` shows
// of a default sandbox.
func TestDefaultSandboxHardening(t *testing.T) {
	p := newProvider(t)
	b := newBox(t, p, nil)
	res, err := p.cli.ContainerInspect(t.Context(), b.inst.ProviderID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := res.Container
	h := c.HostConfig

	type mnt struct {
		Type, Source, Destination string
		RW                        bool
	}
	type view struct {
		User, Network       string
		CapDrop, CapAdd     []string
		Security            []string
		Privileged, Init    bool
		ReadOnlyRoot        bool
		Memory, Swap, CPUs  int64
		Pids                int64
		Tmpfs               map[string]string
		Ports, PublishAll   bool
		Mounts              []mnt
		Running             bool
		Entrypoint, Cmd     []string
		ManagedLabel, Owner string
	}
	var mounts []mnt
	for _, m := range c.Mounts {
		src := m.Source
		if m.Type == "volume" {
			src = m.Name
		}
		mounts = append(mounts, mnt{string(m.Type), src, m.Destination, m.RW})
	}
	slices.SortFunc(mounts, func(a, b mnt) int { return strings.Compare(a.Destination, b.Destination) })
	got := view{
		User: c.Config.User, Network: string(h.NetworkMode),
		CapDrop: h.CapDrop, CapAdd: h.CapAdd, Security: h.SecurityOpt,
		Privileged: h.Privileged, Init: h.Init != nil && *h.Init, ReadOnlyRoot: h.ReadonlyRootfs,
		Memory: h.Memory, Swap: h.MemorySwap, CPUs: h.NanoCPUs, Pids: *h.PidsLimit,
		Tmpfs: h.Tmpfs, Ports: len(h.PortBindings) > 0, PublishAll: h.PublishAllPorts,
		Mounts: mounts, Running: c.State.Running,
		Entrypoint: c.Config.Entrypoint, Cmd: c.Config.Cmd,
		ManagedLabel: c.Config.Labels[sandbox.LabelManaged], Owner: c.Config.Labels[sandbox.LabelSandbox],
	}
	want := view{
		User: "0:0", Network: "none",
		CapDrop: []string{"ALL"}, CapAdd: daemonCaps, Security: []string{"no-new-privileges:true"},
		Init: true, Memory: 2 << 30, Swap: 2 << 30, CPUs: 2e9, Pids: 512,
		Tmpfs: map[string]string{"/tmp": "rw,nosuid,nodev,exec,mode=1777,size=512m"},
		Mounts: []mnt{
			{"bind", p.opts.LimbsdPath, "/opt/limbs/limbsd", false},
			{"bind", b.dir, "/run/limbs", true},
			{"volume", volumeName(b.spec.ID), "/workspace", true},
		},
		Running:      true,
		Entrypoint:   []string{"/opt/limbs/limbsd"},
		Cmd:          []string{"--listen", "unix:///run/limbs/limbsd.sock", "--workdir", "/workspace", "--state-dir", "/run/limbs/state", "--user", "1000:1000"},
		ManagedLabel: "true", Owner: b.spec.ID,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("docker inspect (-want +got):\n%s", diff)
	}
	// No port is published and no network but loopback exists.
	if ns := c.NetworkSettings; ns != nil && len(ns.Ports) > 0 {
		t.Errorf("published ports: %v", ns.Ports)
	}

	// Inside, through limbsd, as an agent would check.
	checks := []struct {
		name, command string
		wantCode      func(int) bool
		wantOut       string
	}{
		{"runs as uid 1000", "id -u", func(c int) bool { return c == 0 }, "1000"},
		{"/etc is not writable", "touch /etc/x", func(c int) bool { return c != 0 }, ""},
		{"no docker socket", "cat /var/run/docker.sock", func(c int) bool { return c != 0 }, ""},
		{"no docker socket under /run", "ls /run/docker.sock", func(c int) bool { return c != 0 }, ""},
		{"no capabilities", "grep CapEff /proc/self/status", func(c int) bool { return c == 0 }, "CapEff:\t0000000000000000"},
		{"no permitted capabilities", "grep CapPrm /proc/self/status", func(c int) bool { return c == 0 }, "CapPrm:\t0000000000000000"},
		{"no ambient capabilities", "grep CapAmb /proc/self/status", func(c int) bool { return c == 0 }, "CapAmb:\t0000000000000000"},
		{"home from the image's passwd", "echo $HOME", func(c int) bool { return c == 0 }, "/home/agent"},
		{"no new privileges", "grep NoNewPrivs /proc/self/status", func(c int) bool { return c == 0 }, "NoNewPrivs:\t1"},
		{"loopback only", "ls /sys/class/net", func(c int) bool { return c == 0 }, "lo"},
		{"limbsd's token is not in the agent's environment", "printenv LIMBS_TOKEN", func(c int) bool { return c != 0 }, ""},
		{"workspace writable", "touch /workspace/x && echo ok", func(c int) bool { return c == 0 }, "ok"},
		{"tmp is a 512 MiB tmpfs", "df -k --output=fstype,size /tmp | tail -1 | tr -s ' '", func(c int) bool { return c == 0 }, "tmpfs 524288"},
	}
	for _, tc := range checks {
		t.Run(tc.name, func(t *testing.T) {
			r := b.run(t, tc.command, 30)
			if !tc.wantCode(exitCode(r)) {
				t.Errorf("%q: exit %d, output %q", tc.command, exitCode(r), r.Output)
			}
			if tc.wantOut != "" && strings.TrimSpace(r.Output) != tc.wantOut {
				t.Errorf("%q: output %q, want %q", tc.command, r.Output, tc.wantOut)
			}
		})
	}
}

// TestReadOnlyRoot: with the option, only /workspace, /tmp and limbsd's
// own directory are writable.
func TestReadOnlyRoot(t *testing.T) {
	p := newProvider(t)
	b := newBox(t, p, func(s *sandbox.Spec) { s.ReadOnlyRoot = true })
	for _, tc := range []struct {
		path     string
		writable bool
	}{
		{"/workspace/f", true},
		{"/tmp/f", true},
		{"/home/agent/f", false},
		{"/var/tmp/f", false},
		{"/opt/limbs/limbsd", false},
	} {
		t.Run(tc.path, func(t *testing.T) {
			r := b.run(t, "echo x >> "+tc.path, 30)
			if got := exitCode(r) == 0; got != tc.writable {
				t.Errorf("writing %s: exit %d (%q), want writable=%v", tc.path, exitCode(r), r.Output, tc.writable)
			}
		})
	}
}

// TestLifecycle: stop keeps the workspace, start brings limbsd back, remove
// deletes the container, the volume it created and the socket directory.
func TestLifecycle(t *testing.T) {
	p := newProvider(t)
	ctx := t.Context()
	b := newBox(t, p, nil)
	if r := b.run(t, "echo kept > /workspace/file", 30); exitCode(r) != 0 {
		t.Fatalf("write: %+v", r)
	}

	list, err := p.List(ctx, "cp_test")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(list, func(i sandbox.Instance) bool { return i.ID == b.spec.ID && i.State.Running }) {
		t.Errorf("List(cp_test) = %+v, want %s running", list, b.spec.ID)
	}
	if other, _ := p.List(ctx, "cp_other"); slices.ContainsFunc(other, func(i sandbox.Instance) bool { return i.ID == b.spec.ID }) {
		t.Errorf("List(cp_other) shows %s", b.spec.ID)
	}

	if err := p.Stop(ctx, b.spec.ID); err != nil {
		t.Fatal(err)
	}
	inst, err := p.Inspect(ctx, b.spec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if inst.State.Running || inst.State.Reason != ReasonStopped {
		t.Errorf("after Stop: %+v, want not running, reason stopped", inst.State)
	}
	if err := p.Stop(ctx, b.spec.ID); err != nil {
		t.Errorf("second Stop: %v", err)
	}

	if err := startReady(ctx, p, b.spec.ID); err != nil {
		t.Fatal(err)
	}
	if r := b.run(t, "cat /workspace/file", 30); strings.TrimSpace(r.Output) != "kept" {
		t.Errorf("workspace after restart: %q", r.Output)
	}

	if err := p.Remove(ctx, b.spec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Inspect(ctx, b.spec.ID); !errors.Is(err, wire.ErrNotFound) {
		t.Errorf("Inspect after Remove = %v, want ErrNotFound", err)
	}
	if _, err := p.cli.VolumeInspect(ctx, volumeName(b.spec.ID), client.VolumeInspectOptions{}); err == nil {
		t.Errorf("volume %s survived Remove", volumeName(b.spec.ID))
	}
	if _, err := os.Stat(b.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket dir after Remove: %v", err)
	}
	if err := p.Remove(ctx, b.spec.ID); !errors.Is(err, wire.ErrNotFound) {
		t.Errorf("second Remove = %v, want ErrNotFound", err)
	}
}

// TestNamedUser: a user given by name (here Debian's nobody, uid 65534)
// cannot be resolved on the host; limbsd still gets a socket and state
// directory it can write.
func TestNamedUser(t *testing.T) {
	p := newProvider(t)
	b := newBox(t, p, func(s *sandbox.Spec) { s.User = "nobody" })
	if r := b.run(t, "id -u", 30); strings.TrimSpace(r.Output) != "65534" {
		t.Errorf("id -u as nobody: %+v", r)
	}
}

// TestRemoveKeepsNamedWorkspace: a workspace the caller named outlives the
// sandbox.
func TestRemoveKeepsNamedWorkspace(t *testing.T) {
	p := newProvider(t)
	ctx := t.Context()
	dir := t.TempDir()
	if err := os.Chown(dir, 1000, 1000); err != nil {
		t.Skipf("docker tests skipped: cannot give %s to uid 1000: %v", dir, err)
	}
	b := newBox(t, p, func(s *sandbox.Spec) { s.Workspace = dir })
	if r := b.run(t, "echo hi > /workspace/out", 30); exitCode(r) != 0 {
		t.Fatalf("write: %+v", r)
	}
	if err := p.Remove(ctx, b.spec.ID); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "out"))
	if err != nil || string(got) != "hi\n" {
		t.Errorf("host workspace after Remove: %q, %v", got, err)
	}
}

func TestCreateErrors(t *testing.T) {
	p := newProvider(t)
	tests := []struct {
		name string
		edit func(*sandbox.Spec)
		want error
	}{
		{"missing image", func(s *sandbox.Spec) { s.Image = "limbs/does-not-exist:latest" }, wire.ErrBadRequest},
		{"host network", func(s *sandbox.Spec) { s.Network = "host" }, wire.ErrBadRequest},
		{"docker socket as workspace", func(s *sandbox.Spec) { s.Workspace = "/run" }, wire.ErrBadRequest},
		{"unknown user", func(s *sandbox.Spec) { s.User = "nosuchuser" }, wire.ErrBadRequest},
		{"same id twice", nil, wire.ErrConflict},
		{"foreign volume of the same name", func(s *sandbox.Spec) {}, wire.ErrConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			spec := newSpec(t, p, tt.edit)
			switch tt.name {
			case "same id twice":
				if _, err := createReady(ctx, p, spec); err != nil {
					t.Fatal(err)
				}
			case "foreign volume of the same name":
				// Not labelled as limbs': Remove must not take it, the
				// test's cleanup (by name) does.
				if _, err := p.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: volumeName(spec.ID)}); err != nil {
					t.Fatal(err)
				}
			}
			_, err := createReady(ctx, p, spec)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Create = %v, want %v", err, tt.want)
			}
			switch tt.name {
			case "same id twice":
				// The first sandbox is untouched.
				if inst, err := p.Inspect(ctx, spec.ID); err != nil || !inst.State.Running {
					t.Errorf("first sandbox after the second Create: %+v, %v", inst.State, err)
				}
				if _, err := limbsdClient(t, p, spec).Health(ctx); err != nil {
					t.Errorf("first sandbox's limbsd after the second Create: %v", err)
				}
				if _, err := p.cli.VolumeInspect(ctx, volumeName(spec.ID), client.VolumeInspectOptions{}); err != nil {
					t.Errorf("first sandbox's volume after the second Create: %v", err)
				}
				return
			case "foreign volume of the same name":
				if _, err := p.cli.VolumeInspect(ctx, volumeName(spec.ID), client.VolumeInspectOptions{}); err != nil {
					t.Errorf("the foreign volume was removed: %v", err)
				}
				return
			}
			// Nothing is left behind by a failed Create.
			if _, err := p.cli.ContainerInspect(ctx, containerName(spec.ID), client.ContainerInspectOptions{}); err == nil {
				t.Errorf("container %s left behind", containerName(spec.ID))
			}
			if _, err := p.cli.VolumeInspect(ctx, volumeName(spec.ID), client.VolumeInspectOptions{}); err == nil {
				t.Errorf("volume %s left behind", volumeName(spec.ID))
			}
		})
	}
}

// TestCreateCanceledLeavesNothing: a Create whose caller goes away at any
// moment (a client killed in the middle of a create) either makes the
// sandbox or leaves no container and no volume of its id: the engine goes
// on with a create its client hung up on, so the container it makes after
// the cancellation must still be found and removed.
func TestCreateCanceledLeavesNothing(t *testing.T) {
	p := newProvider(t)
	for _, d := range []time.Duration{0, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
		20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond, 160 * time.Millisecond, 320 * time.Millisecond} {
		t.Run(d.String(), func(t *testing.T) {
			spec := newSpec(t, p, nil)
			ctx, cancel := context.WithTimeout(t.Context(), d)
			_, err := p.Create(ctx, spec)
			cancel()
			if err == nil {
				return // made before the cancellation: newSpec's cleanup removes it
			}
			// Whatever the engine still had in hand has landed by now.
			time.Sleep(2 * time.Second)
			ctx = t.Context()
			if _, err := p.cli.ContainerInspect(ctx, containerName(spec.ID), client.ContainerInspectOptions{}); err == nil {
				t.Errorf("Create cancelled after %v: container %s left behind", d, containerName(spec.ID))
			}
			if _, err := p.cli.VolumeInspect(ctx, volumeName(spec.ID), client.VolumeInspectOptions{}); err == nil {
				t.Errorf("Create cancelled after %v: volume %s left behind", d, volumeName(spec.ID))
			}
		})
	}
}
