package files_test

import (
	"flag"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/files"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// fixture is a files.Server behind a real HTTP server, with the client a
// user would use.
type fixture struct {
	workdir  string
	stateDir string
	srv      *files.Server
	http     *httptest.Server
	c        *client.Client
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	base := t.TempDir()
	f := &fixture{workdir: filepath.Join(base, "workspace"), stateDir: filepath.Join(base, "state")}
	if err := os.MkdirAll(f.workdir, 0o755); err != nil {
		t.Fatal(err)
	}
	f.start(t)
	return f
}

// start (re)starts the server on the same directories, as a daemon
// restart would.
func (f *fixture) start(t *testing.T) {
	t.Helper()
	if f.http != nil {
		f.http.Close()
	}
	srv, err := files.New(files.Options{Workdir: f.workdir, StateDir: f.stateDir})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	f.http = httptest.NewServer(srv)
	t.Cleanup(f.http.Close)
	c, err := client.New(f.http.URL, "", "")
	if err != nil {
		t.Fatal(err)
	}
	f.c = c
}

func (f *fixture) path(rel string) string { return filepath.Join(f.workdir, rel) }

func (f *fixture) write(t *testing.T, rel, content string) {
	t.Helper()
	p := f.path(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(f.path(rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
