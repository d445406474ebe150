package local

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/wire"
)

// The end-to-end behaviour (conformance with and without bubblewrap,
// confinement, recovery, re-adoption) is tested through the control plane
// in internal/control; these are the provider's own rules.

func TestNoteNeverClaimsIsolation(t *testing.T) {
	none, err := New(Options{Root: t.TempDir(), Isolation: IsolateNone})
	if err != nil {
		t.Fatal(err)
	}
	type noteCase struct {
		name string
		p    *Provider
		spec sandbox.Spec
		want []string
	}
	tests := []noteCase{
		{"no isolation", none, sandbox.Spec{ID: "sb_a"}, []string{"local sandbox sb_a is NOT isolated: isolation is turned off"}},
		{"limits", none, sandbox.Spec{ID: "sb_b", MemoryMB: 64}, []string{"NOT isolated", "limits are not enforced"}},
		{"user", none, sandbox.Spec{ID: "sb_e", User: "1000:1000"}, []string{"NOT isolated", `user "1000:1000" is ignored`}},
	}
	if bw, err := New(Options{Root: t.TempDir(), Isolation: IsolateBwrap}); err == nil {
		tests = append(tests,
			noteCase{"bwrap, no limits", bw, sandbox.Spec{ID: "sb_c"}, nil},
			noteCase{"bwrap, limits", bw, sandbox.Spec{ID: "sb_d", Pids: 10}, []string{"limits are not enforced"}})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			note := tc.p.Note(tc.spec)
			if tc.want == nil && note != "" {
				t.Errorf("note %q, want none", note)
			}
			for _, w := range tc.want {
				if !strings.Contains(note, w) {
					t.Errorf("note %q lacks %q", note, w)
				}
			}
			if tc.p.Isolated() && strings.Contains(note, "NOT isolated") || !tc.p.Isolated() && !strings.Contains(note, "NOT isolated") {
				t.Errorf("note %q contradicts Isolated()=%v", note, tc.p.Isolated())
			}
		})
	}
}

func TestBwrapRequiredFailsClearly(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err == nil {
		t.Skip("bubblewrap is installed: the missing case cannot be seen here")
	}
	_, err := New(Options{Root: t.TempDir(), Isolation: IsolateBwrap})
	if err == nil || !strings.Contains(err.Error(), "apt-get install bubblewrap") {
		t.Errorf("isolation bwrap without bwrap: %v", err)
	}
}

func TestSandboxEnvKeepsHostSecretsOut(t *testing.T) {
	t.Setenv("LIMBS_TOKEN", "control-plane-secret")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "host-secret")
	env := sandboxEnv(meta{Workdir: "/w", Spec: sandbox.Spec{Token: "sandbox-token", Env: map[string]string{"ASKED": "1"}}})
	slices.Sort(env)
	for _, kv := range env {
		if strings.Contains(kv, "secret") {
			t.Errorf("host secret reached the sandbox: %s", kv)
		}
	}
	for _, want := range []string{"ASKED=1", "HOME=/w", "LIMBS_TOKEN=sandbox-token"} {
		if !slices.Contains(env, want) {
			t.Errorf("env %v lacks %s", env, want)
		}
	}
}

func TestBwrapArgsOrder(t *testing.T) {
	p := &Provider{opts: Options{Root: "/state/sandboxes", Hide: []string{"/"}, LimbsdPath: "/opt/limbsd"}, bwrap: "/usr/bin/bwrap"}
	m := meta{Workdir: "/home/me/project", Spec: sandbox.Spec{ID: "sb_x"}}
	got := p.bwrapArgs(m)
	want := []string{"/usr/bin/bwrap",
		"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
	}
	for _, d := range []string{"/run", "/var/run"} {
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			want = append(want, "--tmpfs", d)
		}
	}
	want = append(want,
		"--tmpfs", "/", // Hide, before anything is bound back in
		"--ro-bind", "/opt/limbsd", "/opt/limbsd",
		"--bind", "/home/me/project", "/home/me/project",
		"--bind", "/state/sandboxes/sb_x/state", "/state/sandboxes/sb_x/state",
		"--bind", "/state/sandboxes/sb_x/run", "/state/sandboxes/sb_x/run",
		"--cap-drop", "ALL", "--unshare-pid", "--unshare-ipc", "--chdir", "/home/me/project", "--unshare-net", "--",
	)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("bwrap args (-want +got):\n%s", d)
	}
	m.Spec.Network = "bridge"
	if slices.Contains(p.bwrapArgs(m), "--unshare-net") {
		t.Errorf("network bridge still unshares the network")
	}
}

func TestUnknownSandbox(t *testing.T) {
	p, err := New(Options{Root: t.TempDir(), Isolation: IsolateNone})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"Inspect": func() error { _, err := p.Inspect(ctx, "sb_none"); return err },
		"Start":   func() error { return p.Start(ctx, "sb_none") },
		"Stop":    func() error { return p.Stop(ctx, "sb_none") },
		"Remove":  func() error { return p.Remove(ctx, "sb_none") },
	} {
		if err := call(); !errors.Is(err, wire.ErrNotFound) {
			t.Errorf("%s of an unknown sandbox: %v, want not found", name, err)
		}
	}
}

func TestCreateRefusesBadSpecs(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "file")
	os.WriteFile(file, nil, 0o600)
	tests := []struct {
		name   string
		limbsd string
		spec   sandbox.Spec
	}{
		{"id with a slash", "/bin/true", sandbox.Spec{ID: "sb_../x"}},
		{"relative limbsd", "limbsd", sandbox.Spec{ID: "sb_a"}},
		{"relative workspace", "/bin/true", sandbox.Spec{ID: "sb_b", Workspace: "ws"}},
		{"workspace is a file", "/bin/true", sandbox.Spec{ID: "sb_c", Workspace: file}},
		{"etc as workspace", "/bin/true", sandbox.Spec{ID: "sb_d", Workspace: "/etc"}},
		{"the host root as workspace", "/bin/true", sandbox.Spec{ID: "sb_e", Workspace: "/"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(Options{Root: root, Isolation: IsolateNone, LimbsdPath: tc.limbsd})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Create(context.Background(), tc.spec); !errors.Is(err, wire.ErrBadRequest) {
				t.Errorf("Create: %v, want bad request", err)
			}
		})
	}
}

// A daemon that exits at once is reported with its log, and Create fails
// instead of waiting forever.
func TestCreateReportsDaemonThatExits(t *testing.T) {
	root := t.TempDir()
	fake := filepath.Join(root, "fake-limbsd")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho 'cannot start: no shell here' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Root: root, Isolation: IsolateNone, LimbsdPath: fake})
	if err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{ID: "sb_dies", Token: "t"}
	_, err = p.Create(context.Background(), spec)
	if err == nil || !strings.Contains(err.Error(), "cannot start: no shell here") {
		t.Fatalf("Create with a daemon that exits: %v, want its log in the error", err)
	}
	if err := p.Remove(context.Background(), "sb_dies"); err != nil {
		t.Errorf("Remove after a failed create: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "sb_dies")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory left: %v", err)
	}
}

func TestStartTimeRejectsOtherProcess(t *testing.T) {
	p := &Provider{}
	self := os.Getpid()
	st, err := startTime(self)
	if err != nil {
		t.Fatal(err)
	}
	if !p.sameProcess(meta{Pid: self, StartTime: st}) {
		t.Errorf("own process not recognised")
	}
	if p.sameProcess(meta{Pid: self, StartTime: st + 1}) {
		t.Errorf("a reused pid (other start time) taken for the sandbox")
	}
	if p.sameProcess(meta{}) {
		t.Errorf("pid 0 taken for a process")
	}
}

func TestGroupAliveIgnoresZombies(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if !groupAlive(pid) {
		t.Fatalf("a sleeping group counts as gone")
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	// Not reaped yet: a zombie, which must count as gone.
	for {
		st, err := startTime(pid)
		if err != nil || st == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if groupAlive(pid) {
		t.Errorf("a zombie group counts as alive")
	}
	_ = cmd.Wait()
	if groupAlive(pid) {
		t.Errorf("a reaped group counts as alive")
	}
}

// TestMountRace: the bubblewrap failure a concurrent Docker engine causes
// (seen in CI: an overlay mount of a container being created) is told
// apart from every other start failure, so that only it is retried.
func TestMountRace(t *testing.T) {
	for log, want := range map[string]bool{
		`bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: remount "/newroot/var/lib/docker/overlay2/x-init/merged": Invalid argument`: true,
		"bwrap: Can't bind mount /oldroot/ on /newroot/: Permission denied":                                                                                       false,
		"limbsd: --user: unknown user nobody2": false,
	} {
		if got := mountRace(log); got != want {
			t.Errorf("mountRace(%q) = %v, want %v", log, got, want)
		}
	}
}
