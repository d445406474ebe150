package docker

import (
	"context"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/limbs-dev/limbs/internal/sandbox"
)

// TestAnyImage: limbsd works in an image that knows nothing of limbs: no
// uid 1000 user, no /workspace, root as its user and its own entrypoint.
func TestAnyImage(t *testing.T) {
	p := newProvider(t)
	ctx := t.Context()
	ref := "limbs-test/anyimage:" + randomID(t)
	labels := map[string]string{sandbox.LabelManaged: "true"}

	c, err := p.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{
			Image: DefaultImage, User: "0:0", Labels: labels,
			Entrypoint: []string{"/bin/sh", "-c"},
			Cmd:        []string{"userdel -r agent && rm -rf /workspace /var/lib/limbs /run/limbs /opt/limbs"},
		},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cli.ContainerRemove(context.Background(), c.ID, client.ContainerRemoveOptions{Force: true})
	})
	if _, err := p.cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	w := p.cli.ContainerWait(ctx, c.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case r := <-w.Result:
		if r.StatusCode != 0 {
			t.Fatalf("stripping limbs/base: exit %d: %s", r.StatusCode, p.logTail(c.ID))
		}
	case err := <-w.Error:
		t.Fatal(err)
	}
	img, err := p.cli.ContainerCommit(ctx, c.ID, client.ContainerCommitOptions{
		Reference: ref,
		Changes:   []string{`ENTRYPOINT ["/bin/false"]`, `CMD []`, "USER root", "WORKDIR /"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cli.ImageRemove(context.Background(), img.ID, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	})

	b := newBox(t, p, func(s *sandbox.Spec) { s.Image = ref })
	r := b.run(t, "id -u; pwd; touch /workspace/x && echo writable", 30)
	if got := strings.Fields(r.Output); len(got) != 3 || got[0] != "1000" || got[1] != "/workspace" || got[2] != "writable" {
		t.Errorf("in an image without limbs' user or directories: %q (exit %d), want 1000 /workspace writable", r.Output, exitCode(r))
	}
}
