package control_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/provider/docker"
	"github.com/limbs-dev/limbs/internal/provider/local"
	"github.com/limbs-dev/limbs/internal/wire"
)

// BenchmarkDockerSandboxes is acceptance 6 in one run:
//
//	go test -run '^$' -bench DockerSandboxes -benchtime 20x ./internal/control/
//
// It prints, next to Go's mean ns/op, the p50 of each in ms:
//   - cold: POST /sandboxes through limbs serve (a new container) to the
//     first command's result;
//   - warm: the same when a warm pool sandbox is ready;
//   - docker-run-true: `docker run --rm IMAGE true`, the reference;
//   - round-trip: one `true` on a warm session through limbs serve;
//   - docker-exec: `docker exec CONTAINER true` into the same sandbox.
//
// Targets: warm under 50 ms, round-trip under 1 ms and at least 50x faster
// than docker-exec.
func BenchmarkDockerSandboxes(b *testing.B) {
	dir := stateDir(b)
	dp := dockerOrSkip(b, dir)
	p := newDockerPlane(b, dir, dp, map[string]int{docker.DefaultImage: 1})
	instance := p.srv.Instance()
	ctx := context.Background()
	zero := 0.0

	firstCommand := func(b *testing.B, req wire.CreateSandbox) string {
		var sb wire.Sandbox
		if err := p.c.JSON(ctx, http.MethodPost, "/sandboxes", req, &sb); err != nil {
			b.Fatal(err)
		}
		// What `limbs exec --sandbox ID true` does: session main, made
		// on first use.
		c := p.sandboxClient(b, sb.ID)
		if _, err := c.GetSession(ctx, "main"); errors.Is(err, wire.ErrNotFound) {
			_, err = c.CreateSession(ctx, wire.CreateSession{Name: "main"})
			if err != nil && !errors.Is(err, wire.ErrConflict) {
				b.Fatal(err)
			}
		} else if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Exec(ctx, "main", wire.Exec{Command: "true", YieldAfter: &zero}); err != nil {
			b.Fatal(err)
		}
		return sb.ID
	}
	remove := func(b *testing.B, id string) {
		if err := p.c.JSON(ctx, http.MethodDelete, "/sandboxes/"+id, nil, nil); err != nil {
			b.Fatal(err)
		}
	}

	b.Run("cold", func(b *testing.B) {
		var d durations
		for b.Loop() {
			start := time.Now()
			// Limits other than the default keep the pool out of it.
			id := firstCommand(b, wire.CreateSandbox{MemoryMB: 1024})
			d = append(d, time.Since(start))
			b.StopTimer()
			remove(b, id)
			b.StartTimer()
		}
		d.report(b)
	})
	b.Run("warm", func(b *testing.B) {
		var d durations
		for b.Loop() {
			b.StopTimer()
			waitPool(b, p)
			b.StartTimer()
			start := time.Now()
			id := firstCommand(b, wire.CreateSandbox{})
			d = append(d, time.Since(start))
			b.StopTimer()
			remove(b, id)
			b.StartTimer()
		}
		d.report(b)
	})
	b.Run("docker-run-true", func(b *testing.B) {
		var d durations
		for b.Loop() {
			start := time.Now()
			out, err := exec.Command("docker", "run", "--rm", "--network", "none", "--label", "limbs.managed=true",
				"--label", "limbs.instance="+instance, docker.DefaultImage, "true").CombinedOutput()
			if err != nil {
				b.Fatalf("docker run: %v: %s", err, out)
			}
			d = append(d, time.Since(start))
		}
		d.report(b)
	})

	var sb wire.Sandbox
	if err := p.c.JSON(ctx, http.MethodPost, "/sandboxes", wire.CreateSandbox{MemoryMB: 1024}, &sb); err != nil {
		b.Fatal(err)
	}
	defer remove(b, sb.ID)
	b.Run("round-trip", func(b *testing.B) {
		c := p.sandboxClient(b, sb.ID)
		s, err := c.CreateSession(ctx, wire.CreateSession{})
		if err != nil {
			b.Fatal(err)
		}
		roundTrip(b, c, s.ID)
	})
	b.Run("docker-exec", func(b *testing.B) {
		out, err := exec.Command("docker", "ps", "-q", "--filter", "label=limbs.sandbox="+sb.ID).Output()
		container := strings.TrimSpace(string(out))
		if err != nil || container == "" {
			b.Fatalf("finding the container of %s: %v %q", sb.ID, err, out)
		}
		var d durations
		for b.Loop() {
			start := time.Now()
			if out, err := exec.Command("docker", "exec", container, "true").CombinedOutput(); err != nil {
				b.Fatalf("docker exec: %v: %s", err, out)
			}
			d = append(d, time.Since(start))
		}
		d.report(b)
	})
}

// roundTrips is how many commands one iteration of a round-trip case runs.
const roundTrips = 100

func roundTrip(b *testing.B, c *client.Client, session string) {
	ctx := context.Background()
	zero := 0.0
	// Warm the connection and the shell.
	for range 5 {
		if _, err := c.Exec(ctx, session, wire.Exec{Command: "true", YieldAfter: &zero}); err != nil {
			b.Fatal(err)
		}
	}
	// A round trip is cheap next to the sandboxes the other cases make:
	// each iteration times roundTrips of them, so that the percentiles
	// rest on enough samples at any -benchtime.
	var d durations
	for b.Loop() {
		for range roundTrips {
			start := time.Now()
			r, err := c.Exec(ctx, session, wire.Exec{Command: "true", YieldAfter: &zero})
			if err != nil {
				b.Fatal(err)
			}
			d = append(d, time.Since(start))
			if r.Status != wire.StatusExited {
				b.Fatalf("true: %+v", r)
			}
		}
	}
	d.report(b)
}

func waitPool(b *testing.B, p *plane) {
	deadline := time.Now().Add(2 * time.Minute)
	for p.srv.PoolReady(docker.DefaultImage) < 1 {
		if time.Now().After(deadline) {
			b.Fatal("the warm pool never refilled")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// durations are per-operation times, for percentiles.
type durations []time.Duration

func (d durations) report(b *testing.B) {
	if len(d) == 0 {
		return
	}
	s := slices.Clone(d)
	slices.Sort(s)
	ms := func(x time.Duration) float64 { return float64(x) / float64(time.Millisecond) }
	b.ReportMetric(ms(s[len(s)/2]), "p50-ms")
	b.ReportMetric(ms(s[len(s)*9/10]), "p90-ms")
	b.Logf("%s: n=%d p50=%s p90=%s", b.Name(), len(s), fmt.Sprint(s[len(s)/2]), fmt.Sprint(s[len(s)*9/10]))
}

// BenchmarkLocalRoundTrip compares one `true` on a warm session of a local
// sandbox straight through its limbsd socket and through limbs serve, in one
// run: the difference is what the control plane's forwarding costs.
//
//	go test -run '^$' -bench LocalRoundTrip ./internal/control/
func BenchmarkLocalRoundTrip(b *testing.B) {
	dir := stateDir(b)
	removeAll(b, dir)
	p := newPlane(b, dir, local.IsolateAuto, nil)
	var sb wire.Sandbox
	if err := p.c.JSON(context.Background(), http.MethodPost, "/sandboxes", wire.CreateSandbox{}, &sb); err != nil {
		b.Fatal(err)
	}
	via := p.sandboxClient(b, sb.ID)
	s, err := via.CreateSession(context.Background(), wire.CreateSession{Name: "main"})
	if err != nil {
		b.Fatal(err)
	}
	tok, err := os.ReadFile(filepath.Join(dir, "sandboxes", sb.ID, "sandbox.json"))
	if err != nil {
		b.Fatal(err)
	}
	var meta struct {
		Spec struct{ Token string }
	}
	if err := json.Unmarshal(tok, &meta); err != nil {
		b.Fatal(err)
	}
	direct, err := client.New("unix://"+filepath.Join(dir, "sandboxes", sb.ID, "run", "limbsd.sock"), meta.Spec.Token, "")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("direct", func(b *testing.B) { roundTrip(b, direct, s.ID) })
	b.Run("via-serve", func(b *testing.B) { roundTrip(b, via, s.ID) })
}
