package testbin

import (
	"os"
	"testing"
)

// RequireDockerEnv, set to 1, turns every "no Docker engine" skip into a
// failure: CI sets it, so that a run whose engine did not start is red
// instead of green with the Docker tests quietly skipped.
const RequireDockerEnv = "LIMBS_REQUIRE_DOCKER"

// NoDocker is what a Docker test does when the engine or the image it
// needs is missing: it skips saying why, or fails when RequireDockerEnv
// is set. -short skips are not this helper's: they are asked for.
func NoDocker(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(RequireDockerEnv) == "1" {
		t.Fatalf("docker tests cannot run: %s, and %s=1 requires them; start the engine with scripts/docker-up.sh and build the image with scripts/build-base-image.sh", why, RequireDockerEnv)
	}
	t.Skip("docker tests skipped: " + why)
}
