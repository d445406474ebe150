// Package testbin is what tests that run real processes need: the
// project's commands built once per test binary (limbsd on a socket, limbs
// serve killed with SIGKILL) into one temporary directory that Main
// removes, a limbsd started on a socket for one test, a buffer a process
// can write while the test reads it, and a bounded wait for something it
// does in the background.
//
// It must never be imported by non-test code.
package testbin

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	dir   string
	built = map[string]string{} // name+flags -> path
	fails = map[string]error{}
)

// Main runs the tests and removes what Path built. Call it from TestMain:
// os.Exit(testbin.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	mu.Lock()
	if dir != "" {
		os.RemoveAll(dir)
	}
	mu.Unlock()
	return code
}

// Path builds ./cmd/NAME of this module, static (CGO_ENABLED=0) as shipped,
// or with the race detector when race is set, once per test binary, and
// returns the binary's path. All binaries land in one directory, so limbs
// serve finds its limbsd next to it.
func Path(t testing.TB, name string, race bool) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("the go command is not on PATH: cannot build cmd/%s", name)
	}
	key := name
	if race {
		key += " -race"
	}
	mu.Lock()
	defer mu.Unlock()
	if p, ok := built[key]; ok {
		return p
	}
	if err, ok := fails[key]; ok {
		t.Fatal(err)
	}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "limbs-testbin-"); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, name)
	args := []string{"build", "-o", out}
	env := append(os.Environ(), "CGO_ENABLED=0")
	if race {
		out += "-race"
		args = []string{"build", "-race", "-o", out}
		env = append(os.Environ(), "CGO_ENABLED=1")
	}
	cmd := exec.Command(goBin, append(args, "./cmd/"+name)...)
	cmd.Dir = moduleRoot()
	cmd.Env = env
	if b, err := cmd.CombinedOutput(); err != nil {
		fails[key] = errors.New("building cmd/" + name + ": " + err.Error() + "\n" + string(b))
		t.Fatal(fails[key])
	}
	built[key] = out
	return out
}

// moduleRoot is the directory holding go.mod, two levels above this file.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}
