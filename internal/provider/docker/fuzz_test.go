package docker

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/limbs-dev/limbs/internal/sandbox"
	"github.com/limbs-dev/limbs/internal/wire"
)

// FuzzSpec feeds client-controlled Spec fields through validation and the
// create request: a spec is either refused as a bad request or yields a
// container that keeps every invariant of the hardening.
func FuzzSpec(f *testing.F) {
	for _, s := range [][3]string{
		{"", "", ""}, {"1000:1000", "projects", "none"}, {"0:0", "/tmp", "bridge"},
		{"agent", "/", "host"}, {"1000:x", "/run", "container:x"}, {"-1", "../etc", "none"},
		{"1000", "/var/run", "bridge"}, {"", "a b", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	limbsd := filepath.Join(f.TempDir(), "limbsd")
	if err := os.WriteFile(limbsd, staticELFHeader(), 0o755); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, user, workspace, network string) {
		spec := testSpec()
		spec.User, spec.Workspace, spec.Network = user, workspace, sandbox.Network(network)
		spec = withDefaults(spec)
		o := Options{SocketRoot: "/var/lib/limbs/sockets", LimbsdPath: limbsd}
		if err := o.validate(spec); err != nil {
			if !errors.Is(err, wire.ErrBadRequest) {
				t.Fatalf("validate: %v is not a bad request", err)
			}
			return
		}
		c := o.createOptions(spec, false)
		h := c.HostConfig
		if n := string(h.NetworkMode); n != "none" && n != "bridge" {
			t.Fatalf("network %q accepted", n)
		}
		if !slices.Equal(h.CapDrop, []string{"ALL"}) || h.Privileged || len(h.PortBindings) > 0 {
			t.Fatalf("hardening lost: %+v", h)
		}
		if len(h.Mounts) != 3 || h.Mounts[0].Target != Workspace {
			t.Fatalf("mounts: %+v", h.Mounts)
		}
		for _, m := range h.Mounts {
			if m.Type != "bind" {
				continue
			}
			if !filepath.IsAbs(m.Source) || m.Source == "/" {
				t.Fatalf("bind mount of %q", m.Source)
			}
			for _, sock := range dockerSockets {
				if rel, err := filepath.Rel(m.Source, sock); err == nil && filepath.IsLocal(rel) {
					t.Fatalf("bind mount %q exposes %s", m.Source, sock)
				}
			}
		}
	})
}
