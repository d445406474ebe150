package docker

import (
	"debug/elf"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Defaults for the Spec fields left zero. A negative Cpus, MemoryMB, Pids or
// TmpMB removes that limit.
const (
	DefaultImage    = "limbs/base:latest"
	DefaultUser     = "1000:1000"
	DefaultCpus     = 2.0
	DefaultMemoryMB = 2048
	DefaultPids     = 512
	DefaultTmpMB    = 512
	DefaultNetwork  = sandbox.NetworkNone
)

// Paths inside the sandbox.
const (
	LimbsdPath = "/opt/limbs/limbsd"
	SocketDir  = "/run/limbs"
	Socket     = SocketDir + "/limbsd.sock"
	Workspace  = "/workspace"
	// StateDir lives in the socket directory, a host bind mount, because it
	// is the one place that survives a container restart (even with a
	// read-only root), that uid 1000 can write in any image, and that adds
	// no mount: limbsd's session state and output logs are there.
	StateDir = SocketDir + "/state"
)

// Labels the provider adds to sandbox.LabelManaged/Instance/Sandbox.
const (
	labelName      = "limbs.name"
	labelVolume    = "limbs.workspace-volume" // set only when the provider created it
	labelLower     = "limbs.workspace-lower"  // a copy-on-write workspace's lower layer (host dir)
	labelSocketDir = "limbs.socket-dir"
)

// containerName is the name of a sandbox's container; it also makes a
// second Create of the same sandbox id fail with a conflict.
func containerName(id string) string { return "limbs-" + id }

// volumeName is the name of the workspace volume the provider creates when
// the Spec names none.
func volumeName(id string) string { return "limbs-ws-" + id }

var (
	idRE     = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,100}$`)
	volumeRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)
)

// dockerSockets are the engine sockets a workspace bind mount must never
// expose.
var dockerSockets = []string{"/var/run/docker.sock", "/run/docker.sock"}

// withDefaults fills the zero fields of spec.
func withDefaults(spec sandbox.Spec) sandbox.Spec {
	if spec.Image == "" {
		spec.Image = DefaultImage
	}
	if spec.User == "" {
		spec.User = DefaultUser
	}
	if spec.Cpus == 0 {
		spec.Cpus = DefaultCpus
	}
	if spec.MemoryMB == 0 {
		spec.MemoryMB = DefaultMemoryMB
	}
	if spec.Pids == 0 {
		spec.Pids = DefaultPids
	}
	if spec.TmpMB == 0 {
		spec.TmpMB = DefaultTmpMB
	}
	if spec.Network == "" {
		spec.Network = DefaultNetwork
	}
	return spec
}

// workspaceKind says how the Spec's Workspace is mounted.
type workspaceKind int

const (
	wsNewVolume workspaceKind = iota // empty: a volume the provider creates and later removes
	wsVolume                         // a volume name: used, never removed
	wsHostDir                        // an absolute host path: bind-mounted, never removed
)

func classifyWorkspace(ws string) workspaceKind {
	switch {
	case ws == "":
		return wsNewVolume
	case strings.HasPrefix(ws, "/"):
		return wsHostDir
	default:
		return wsVolume
	}
}

// socketDir is the host side of sandbox id's /run/limbs.
func (o Options) socketDir(id string) string { return filepath.Join(o.SocketRoot, id, "run") }

// overlayDir holds the upper and work directories of sandbox id's
// copy-on-write workspace (Spec.WorkspaceLower). It is never mounted into
// the sandbox: the sandbox reaches its files only through the overlay.
func (o Options) overlayDir(id string) string { return filepath.Join(o.SocketRoot, id+".ws") }

// validate checks a defaulted spec, and the options it is created with,
// and says what to fix.
func (o Options) validate(spec sandbox.Spec) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("sandbox %q: %s: %w", spec.ID, fmt.Sprintf(format, a...), wire.ErrBadRequest)
	}
	if !idRE.MatchString(spec.ID) {
		return bad("id %q: use letters, digits, '_', '.', '-'", spec.ID)
	}
	if spec.Network != sandbox.NetworkNone && spec.Network != sandbox.NetworkBridge {
		return bad("network %q: use none (default) or bridge", spec.Network)
	}
	if !filepath.IsAbs(o.SocketRoot) {
		return bad("the docker provider's socket root %q must be an absolute host path", o.SocketRoot)
	}
	if l := spec.WorkspaceLower; l != "" {
		// The overlay's options are one comma-separated string.
		if classifyWorkspace(spec.Workspace) != wsNewVolume || !filepath.IsAbs(l) || filepath.Clean(l) != l || strings.ContainsAny(l, ",:\\\x00") || strings.ContainsAny(o.SocketRoot, ",:\\\x00") {
			return bad("a copy-on-write workspace needs a fresh volume and clean absolute paths without ',', ':' or '\\' (lower %q, socket root %q)", l, o.SocketRoot)
		}
	}
	if err := checkStatic(o.LimbsdPath); err != nil {
		return bad("%v", err)
	}
	switch classifyWorkspace(spec.Workspace) {
	case wsVolume:
		if !volumeRE.MatchString(spec.Workspace) {
			return bad("workspace %q is neither an absolute host directory nor a volume name", spec.Workspace)
		}
	case wsHostDir:
		if err := checkHostWorkspace(spec.Workspace); err != nil {
			return fmt.Errorf("sandbox %q: %w", spec.ID, err)
		}
	}
	return nil
}

// checkStatic refuses a limbsd that cannot run in an arbitrary image: a
// missing file or a dynamically linked one.
func checkStatic(path string) error {
	hint := "build it with CGO_ENABLED=0 go build -o bin/limbsd ./cmd/limbsd"
	if !filepath.IsAbs(path) {
		return fmt.Errorf("limbsd path %q must be an absolute host path; %s", path, hint)
	}
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("limbsd binary %s: %v; %s", path, err, hint)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("limbsd binary %s is dynamically linked and would not start in most images; %s", path, hint)
		}
	}
	return nil
}

// checkHostWorkspace refuses host directories that would expose the host:
// the system directories of sandbox.SystemPaths (the root among them), and
// any directory holding the Docker socket. The control plane checks its
// own policy (state dir, --workspace-root) before; this is the provider's
// own floor. Errors wrap wire.ErrBadRequest.
func checkHostWorkspace(dir string) error {
	real, err := sandbox.WorkspacePolicy{}.CheckHostWorkspace(dir)
	if err != nil {
		return err
	}
	for _, s := range dockerSockets {
		sock := s
		if r, err := filepath.EvalSymlinks(s); err == nil {
			sock = r
		}
		if rel, err := filepath.Rel(real, sock); err == nil && !strings.HasPrefix(rel, "..") {
			return fmt.Errorf("workspace %s contains the Docker socket %s, which would give the sandbox the host; pass a directory that does not: %w", dir, s, wire.ErrBadRequest)
		}
	}
	return nil
}

// parseUser returns the numeric uid and gid of a "uid[:gid]" user, and
// ok=false for names, which only the image's /etc/passwd can resolve.
//
// The name root is uid (and group) 0 in every image: a sandbox whose
// User is "root" must get what "0:0" gets (no capability, see
// createOptions), not limbsd's capabilities.
func parseUser(user string) (uid, gid int, ok bool) {
	u, g, hasGroup := strings.Cut(user, ":")
	uid, err := atoiOrRoot(u)
	if err != nil || uid < 0 {
		return 0, 0, false
	}
	gid = uid
	if hasGroup {
		if gid, err = atoiOrRoot(g); err != nil || gid < 0 {
			return 0, 0, false
		}
	}
	return uid, gid, true
}

func atoiOrRoot(s string) (int, error) {
	if s == "root" {
		return 0, nil
	}
	return strconv.Atoi(s)
}

// createOptions turns a defaulted, valid spec into the engine's create
// request. volume is the workspace volume's name (wsNewVolume, wsVolume);
// noCopy is set when the provider already gave a new volume to the
// sandbox's user, so the image's /workspace ownership must not replace it.
func (o Options) createOptions(spec sandbox.Spec, noCopy bool) client.ContainerCreateOptions {
	labels := map[string]string{
		sandbox.LabelManaged:  "true",
		sandbox.LabelInstance: spec.Instance,
		sandbox.LabelSandbox:  spec.ID,
		labelName:             spec.Name,
		labelSocketDir:        o.socketDir(spec.ID),
	}

	var ws mount.Mount
	switch classifyWorkspace(spec.Workspace) {
	case wsNewVolume:
		labels[labelVolume] = volumeName(spec.ID)
		ws = mount.Mount{Type: mount.TypeVolume, Source: volumeName(spec.ID), Target: Workspace}
		if noCopy {
			ws.VolumeOptions = &mount.VolumeOptions{NoCopy: true}
		}
	case wsVolume:
		ws = mount.Mount{Type: mount.TypeVolume, Source: spec.Workspace, Target: Workspace}
	case wsHostDir:
		// The resolved path (validate checked it): Start checks that it
		// still resolves to itself.
		src := spec.Workspace
		if r, err := filepath.EvalSymlinks(src); err == nil {
			src = r
		}
		ws = mount.Mount{Type: mount.TypeBind, Source: src, Target: Workspace}
	}

	env := make([]string, 0, len(spec.Env)+2)
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		if k == "LIMBS_TOKEN" {
			continue
		}
		env = append(env, k+"="+spec.Env[k])
	}
	env = append(env, "LIMBS_SANDBOX="+spec.ID)
	if spec.Token != "" {
		env = append(env, "LIMBS_TOKEN="+spec.Token)
	}

	res := container.Resources{}
	if spec.Cpus > 0 {
		res.NanoCPUs = int64(spec.Cpus * 1e9)
	}
	if spec.MemoryMB > 0 {
		res.Memory = spec.MemoryMB << 20
		// No swap on top: a hog is OOM-killed at the limit instead of
		// thrashing the host's disk.
		res.MemorySwap = res.Memory
	}
	pids := int64(-1)
	if spec.Pids > 0 {
		pids = spec.Pids
	}
	res.PidsLimit = &pids

	tmp := "rw,nosuid,nodev,exec,mode=1777"
	if spec.TmpMB > 0 {
		tmp += fmt.Sprintf(",size=%dm", spec.TmpMB)
	}

	security := []string{"no-new-privileges:true"}
	if o.AllowNewPrivileges {
		security = nil
	}
	init := true
	stop := int(o.StopTimeout.Seconds())

	// limbsd has an identity of its own, container root with only the
	// capabilities it needs to manage the agent's processes; the agent
	// (spec.User) gets no capability at all (see daemonCaps). A root
	// agent is limbsd's own user: nothing to switch, no capability added.
	user, capAdd := spec.User, o.CapAdd
	cmd := []string{
		"--listen", "unix://" + Socket,
		"--workdir", Workspace,
		"--state-dir", StateDir,
	}
	if uid, _, ok := parseUser(spec.User); !ok || uid != 0 {
		user = "0:0"
		capAdd = append(slices.Clone(daemonCaps), o.CapAdd...)
		cmd = append(cmd, "--user", spec.User)
	}

	return client.ContainerCreateOptions{
		Name: containerName(spec.ID),
		Config: &container.Config{
			Image:       spec.Image,
			User:        user,
			Env:         env,
			Entrypoint:  []string{LimbsdPath},
			Cmd:         append(cmd, spec.DiskFlags()...),
			WorkingDir:  Workspace,
			Labels:      labels,
			StopTimeout: &stop,
		},
		HostConfig: &container.HostConfig{
			NetworkMode: container.NetworkMode(spec.Network),
			// Recovery is the control plane's: it learns why a sandbox died
			// from Events and restarts it with Start, keeping the reason.
			RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
			LogConfig: container.LogConfig{
				Type:   "json-file",
				Config: map[string]string{"max-size": "10m", "max-file": "2"},
			},
			CapDrop:        []string{"ALL"},
			CapAdd:         capAdd,
			SecurityOpt:    security,
			IpcMode:        container.IPCModePrivate,
			ReadonlyRootfs: spec.ReadOnlyRoot,
			Tmpfs:          map[string]string{"/tmp": tmp},
			Init:           &init,
			Resources:      res,
			Mounts: []mount.Mount{
				ws,
				{Type: mount.TypeBind, Source: o.socketDir(spec.ID), Target: SocketDir},
				{Type: mount.TypeBind, Source: o.LimbsdPath, Target: LimbsdPath, ReadOnly: true},
			},
		},
	}
}

// daemonCaps are limbsd's capabilities when the agent is another user:
// SETUID and SETGID start each shell (and the files worker) as the agent;
// KILL signals the agent's processes; SYS_PTRACE reads their /proc state
// (cwd, the system call a process waits in: readable only by their owner
// otherwise); CHOWN gives the agent its terminal and its per-session
// directories; DAC_OVERRIDE writes the command file into, reads the
// environment saves from, and removes, those agent-owned directories.
// None of them reaches a shell: a process that changes its uid from root
// to another loses them all.
var daemonCaps = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SYS_PTRACE"}

// socketDirMode is the mode of the host side of /run/limbs and of its
// state directory: the control plane's (container root is host root),
// passable by the agent to reach its own directories inside, never
// writable by it.
const socketDirMode = 0o711

// prepareSocketDir creates the host side of /run/limbs and its state
// directory, or checks them when they exist (a restart), never following
// a link: the directory's parent is the control plane's, and a sandbox
// whose agent is root can change what is inside. Nothing is chowned: the
// directories stay the control plane's, and limbsd (container root)
// writes there with its own identity.
func prepareSocketDir(dir string) error {
	parent, base := filepath.Split(dir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return fmt.Errorf("socket dir: %w", err)
	}
	for _, rel := range []string{base, filepath.Join(base, "state")} {
		if err := sandbox.MkdirBeneath(parent, rel, socketDirMode); err != nil {
			return fmt.Errorf("socket dir: %w", err)
		}
	}
	return nil
}
