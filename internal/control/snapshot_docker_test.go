package control_test

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/testbin"
)

// limbs snapshot: the image holds the container's own changes and the
// workspace volume's files, and carries no limbs label that would make
// its containers pass for sandboxes.
func TestDockerSnapshot(t *testing.T) {
	p, sb, c := dockerSession(t, stateDir(t))
	// /tmp is a tmpfs (tmp_mb): the agent's home is in the container's layer.
	home := execIn(t, c, `echo in-volume > /workspace/hello.txt && mkdir -p /workspace/d && ln -s ../hello.txt /workspace/d/link && echo in-layer > "$HOME/outside.txt" && echo "$HOME"`)
	img := "limbs-test-snapshot:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", img).Run() })
	limbs := testbin.Path(t, "limbs", false)
	out, err := exec.Command(limbs, "snapshot", "--addr", strings.TrimPrefix(p.ts.URL, "http://"), "--token", e2eToken, sb, "--image", img).CombinedOutput()
	if err != nil {
		t.Fatalf("limbs snapshot: %v: %s", err, out)
	}
	got, err := exec.Command("docker", "run", "--rm", "--network", "none", "--entrypoint", "cat", img, "/workspace/d/link", home+"/outside.txt").CombinedOutput()
	if err != nil || string(got) != "in-volume\nin-layer\n" {
		t.Fatalf("the image holds %q (%v); want the workspace file (through its link) and the layer's", got, err)
	}
	labels, err := exec.Command("docker", "image", "inspect", "--format", `{{index .Config.Labels "limbs.managed"}}|{{index .Config.Labels "limbs.instance"}}`, img).Output()
	if err != nil || strings.TrimSpace(string(labels)) != "|" {
		t.Errorf("the image's limbs labels: %q (%v); want them empty", labels, err)
	}
}
