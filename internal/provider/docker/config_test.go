package docker

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/moby/moby/api/types/events"

	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/wire"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// testSpec is a spec whose paths do not depend on the machine.
func testSpec() sandbox.Spec {
	return sandbox.Spec{
		ID:       "sb_golden",
		Name:     "golden",
		Instance: "cp_test",
		Token:    "t0ken",
		Env:      map[string]string{"B": "2", "A": "1", "LIMBS_TOKEN": "ignored"},
	}
}

// TestCreateOptionsGolden pins the whole create request of a default
// sandbox: every hardening default is visible in one reviewed file.
func TestCreateOptionsGolden(t *testing.T) {
	o := Options{StopTimeout: 5 * time.Second, SocketRoot: "/var/lib/limbs/sockets", LimbsdPath: "/usr/local/lib/limbs/limbsd"}
	got, err := json.MarshalIndent(o.createOptions(withDefaults(testSpec()), true), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "create-default.golden.json")
	if *update {
		if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -run TestCreateOptionsGolden -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)+"\n"); diff != "" {
		t.Errorf("create request changed (-golden +got); if intended, rerun with -update:\n%s", diff)
	}
}

// TestCreateOptionsOverrides checks that each default can be loosened per
// sandbox, and only the field asked for changes.
func TestCreateOptionsOverrides(t *testing.T) {
	type view struct {
		User, Network, Tmp string
		Memory, Swap, Nano int64
		Pids               int64
		ReadOnly           bool
		WSType, WSSource   string
		NoCopy             bool
		VolumeLabel        string
		CapAdd             []string
		Security           []string
	}
	see := func(o Options, s sandbox.Spec, noCopy bool) view {
		c := o.createOptions(withDefaults(s), noCopy)
		h := c.HostConfig
		ws := h.Mounts[0]
		return view{
			User: c.Config.User, Network: string(h.NetworkMode), Tmp: h.Tmpfs["/tmp"],
			Memory: h.Memory, Swap: h.MemorySwap, Nano: h.NanoCPUs, Pids: *h.PidsLimit,
			ReadOnly: h.ReadonlyRootfs, WSType: string(ws.Type), WSSource: ws.Source,
			NoCopy: ws.VolumeOptions != nil && ws.VolumeOptions.NoCopy, VolumeLabel: c.Config.Labels[labelVolume],
			CapAdd: h.CapAdd, Security: h.SecurityOpt,
		}
	}
	// limbsd is container root with its own capabilities; the agent
	// (Spec.User) is passed to it with --user.
	base := view{
		User: "0:0", Network: "none", Tmp: "rw,nosuid,nodev,exec,mode=1777,size=512m",
		CapAdd: daemonCaps,
		Memory: 2 << 30, Swap: 2 << 30, Nano: 2e9, Pids: 512,
		WSType: "volume", WSSource: "limbs-ws-sb_golden", VolumeLabel: "limbs-ws-sb_golden",
		Security: []string{"no-new-privileges:true"},
	}
	tests := []struct {
		name   string
		opts   Options
		edit   func(*sandbox.Spec)
		noCopy bool
		want   func(*view)
	}{
		{"defaults", Options{}, func(*sandbox.Spec) {}, false, func(*view) {}},
		{"volume given to the user", Options{}, func(*sandbox.Spec) {}, true, func(v *view) { v.NoCopy = true }},
		{"limits", Options{}, func(s *sandbox.Spec) { s.Cpus, s.MemoryMB, s.Pids, s.TmpMB = 0.5, 256, 64, 16 }, false, func(v *view) {
			v.Nano, v.Memory, v.Swap, v.Pids, v.Tmp = 5e8, 256<<20, 256<<20, 64, "rw,nosuid,nodev,exec,mode=1777,size=16m"
		}},
		{"no limits", Options{}, func(s *sandbox.Spec) { s.Cpus, s.MemoryMB, s.Pids, s.TmpMB = -1, -1, -1, -1 }, false, func(v *view) {
			v.Nano, v.Memory, v.Swap, v.Pids, v.Tmp = 0, 0, 0, -1, "rw,nosuid,nodev,exec,mode=1777"
		}},
		{"bridge network", Options{}, func(s *sandbox.Spec) { s.Network = "bridge" }, false, func(v *view) { v.Network = "bridge" }},
		{"root user", Options{}, func(s *sandbox.Spec) { s.User = "0:0" }, false, func(v *view) { v.User, v.CapAdd = "0:0", nil }},
		{"read-only root", Options{}, func(s *sandbox.Spec) { s.ReadOnlyRoot = true }, false, func(v *view) { v.ReadOnly = true }},
		{"named volume", Options{}, func(s *sandbox.Spec) { s.Workspace = "projects" }, false, func(v *view) {
			v.WSSource, v.VolumeLabel = "projects", ""
		}},
		{"host dir", Options{}, func(s *sandbox.Spec) { s.Workspace = "/srv/project" }, false, func(v *view) {
			v.WSType, v.WSSource, v.VolumeLabel = "bind", "/srv/project", ""
		}},
		{"capabilities and privileges", Options{CapAdd: []string{"NET_BIND_SERVICE"}, AllowNewPrivileges: true}, func(*sandbox.Spec) {}, false, func(v *view) {
			v.CapAdd, v.Security = append(slices.Clone(daemonCaps), "NET_BIND_SERVICE"), nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testSpec()
			tt.edit(&s)
			want := base
			tt.want(&want)
			if diff := cmp.Diff(want, see(tt.opts, s, tt.noCopy)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	static := filepath.Join(dir, "limbsd")
	if err := os.WriteFile(static, minimalStaticELF(t), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		edit func(*sandbox.Spec)
		ok   bool
	}{
		{"default", func(*sandbox.Spec) {}, true},
		{"host network", func(s *sandbox.Spec) { s.Network = "host" }, false},
		{"container network", func(s *sandbox.Spec) { s.Network = "container:abc" }, false},
		{"bad id", func(s *sandbox.Spec) { s.ID = "../x" }, false},
		{"host root as workspace", func(s *sandbox.Spec) { s.Workspace = "/" }, false},
		{"docker socket dir as workspace", func(s *sandbox.Spec) { s.Workspace = "/run" }, false},
		{"missing host dir", func(s *sandbox.Spec) { s.Workspace = filepath.Join(dir, "missing") }, false},
		{"etc as workspace", func(s *sandbox.Spec) { s.Workspace = "/etc" }, false},
		{"proc via .. as workspace", func(s *sandbox.Spec) { s.Workspace = "/proc/self/.." }, false},
		{"var (holds docker's state) as workspace", func(s *sandbox.Spec) { s.Workspace = "/var" }, false},
		{"host dir", func(s *sandbox.Spec) { s.Workspace = dir }, true},
		{"volume name", func(s *sandbox.Spec) { s.Workspace = "my-project_1" }, true},
		{"bad volume name", func(s *sandbox.Spec) { s.Workspace = "a b" }, false},
	}
	for _, tt := range []struct {
		name string
		edit func(*Options)
	}{
		{"relative socket root", func(o *Options) { o.SocketRoot = "sockets" }},
		{"no socket root", func(o *Options) { o.SocketRoot = "" }},
		{"missing limbsd", func(o *Options) { o.LimbsdPath = filepath.Join(dir, "nope") }},
		{"limbsd not an ELF", func(o *Options) { o.LimbsdPath = "/etc/passwd" }},
		{"dynamic limbsd", func(o *Options) { o.LimbsdPath = "/bin/sh" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := Options{SocketRoot: dir, LimbsdPath: static}
			tt.edit(&o)
			if err := o.validate(withDefaults(testSpec())); !errors.Is(err, wire.ErrBadRequest) {
				t.Fatalf("validate = %v, want an ErrBadRequest", err)
			}
		})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testSpec()
			tt.edit(&s)
			err := Options{SocketRoot: dir, LimbsdPath: static}.validate(withDefaults(s))
			if tt.ok && err != nil {
				t.Fatalf("validate: %v", err)
			}
			if !tt.ok && !errors.Is(err, wire.ErrBadRequest) {
				t.Fatalf("validate = %v, want an ErrBadRequest", err)
			}
		})
	}
}

// minimalStaticELF returns a valid ELF header with no program interpreter,
// which is all checkStatic reads.
func minimalStaticELF(t *testing.T) []byte {
	t.Helper()
	return staticELFHeader()
}

func staticELFHeader() []byte {
	b := make([]byte, 64)
	copy(b, "\x7fELF")
	b[4], b[5], b[6] = 2, 1, 1 // 64-bit, little endian, version 1
	b[16], b[18], b[20] = 2, 0x3e, 1
	b[52] = 64 // header size
	return b
}

func TestParseUser(t *testing.T) {
	tests := []struct {
		in       string
		uid, gid int
		ok       bool
	}{
		{"1000:1000", 1000, 1000, true},
		{"1000", 1000, 1000, true},
		{"0:0", 0, 0, true},
		{"1000:50", 1000, 50, true},
		{"agent", 0, 0, false},
		{"1000:agent", 0, 0, false},
		{"-1", 0, 0, false},
		{"root", 0, 0, true},
		{"root:root", 0, 0, true},
		{"0:root", 0, 0, true},
		{"root:50", 0, 50, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			uid, gid, ok := parseUser(tt.in)
			if diff := cmp.Diff([]any{tt.uid, tt.gid, tt.ok}, []any{uid, gid, ok}); diff != "" {
				t.Errorf("parseUser(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

// TestTranslate checks the reasons reported for each engine event
// sequence, in particular that a die right after an oom event is an OOM
// kill while the sticky engine flag alone is not.
func TestTranslate(t *testing.T) {
	at := func(s int) int64 { return time.Unix(1_700_000_000+int64(s), 0).UnixNano() }
	msg := func(action events.Action, sec int, attrs ...string) events.Message {
		a := map[string]string{sandbox.LabelSandbox: "sb_1"}
		for i := 0; i+1 < len(attrs); i += 2 {
			a[attrs[i]] = attrs[i+1]
		}
		return events.Message{Type: events.ContainerEventType, Action: action, Actor: events.Actor{ID: "c1", Attributes: a}, TimeNano: at(sec)}
	}
	type got struct{ Kind, Reason string }
	tests := []struct {
		name string
		in   []events.Message
		want []got
	}{
		{"start", []events.Message{msg(events.ActionStart, 0)}, []got{{"started", ""}}},
		{"clean stop", []events.Message{msg(events.ActionDie, 0, "exitCode", "0")}, []got{{"died", "stopped"}}},
		{"kill -9 of limbsd", []events.Message{msg(events.ActionDie, 0, "exitCode", "137")}, []got{{"died", "daemon_exited"}}},
		{"crash", []events.Message{msg(events.ActionDie, 0, "exitCode", "2")}, []got{{"died", "daemon_exited"}}},
		{"limbsd oom killed", []events.Message{msg(events.ActionOOM, 0), msg(events.ActionDie, 1, "exitCode", "137")},
			[]got{{"oom", "oom_killed"}, {"died", "oom_killed"}}},
		{"old oom then kill -9", []events.Message{msg(events.ActionOOM, 0), msg(events.ActionDie, 60, "exitCode", "137")},
			[]got{{"oom", "oom_killed"}, {"died", "daemon_exited"}}},
		{"oom forgotten on restart", []events.Message{msg(events.ActionOOM, 0), msg(events.ActionStart, 1), msg(events.ActionDie, 2, "exitCode", "137")},
			[]got{{"oom", "oom_killed"}, {"started", ""}, {"died", "daemon_exited"}}},
		{"removed", []events.Message{msg(events.ActionDestroy, 0)}, []got{{"removed", "removed"}}},
		{"not a sandbox", []events.Message{{Action: events.ActionDie, Actor: events.Actor{ID: "x"}}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			oom := map[string]time.Time{}
			var out []got
			for _, m := range tt.in {
				if ev, ok := translate(m, oom); ok {
					if ev.ID != "sb_1" {
						t.Errorf("event for %q, want sb_1", ev.ID)
					}
					out = append(out, got{string(ev.Kind), ev.Reason})
				}
			}
			if diff := cmp.Diff(tt.want, out); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
