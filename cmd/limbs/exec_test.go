package main

import (
	"bytes"
	"flag"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/runtime"
	"github.com/limbs-dev/limbs/internal/shell"
	"github.com/limbs-dev/limbs/internal/wire"
)

// newDaemon serves the real limbsd API, with real shells, on 127.0.0.1.
func newDaemon(t *testing.T) *client.Client {
	t.Helper()
	m, err := shell.NewManager(t.Context(), shell.Options{StateDir: t.TempDir(), Workdir: t.TempDir()})
	if err != nil {
		t.Fatalf("shell.NewManager: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	srv := httptest.NewServer(runtime.New(runtime.Options{Token: "tok", Manager: m}))
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL, "tok", "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestExecRun(t *testing.T) {
	c := newDaemon(t)
	cn := &conn{sessionName: "cli-test"}
	id, err := cn.session(t.Context(), c)
	if err != nil {
		t.Fatalf("creating the session on first use: %v", err)
	}
	again, err := cn.session(t.Context(), c)
	if err != nil || again != id {
		t.Fatalf("second use: %q, %v; want the same session %q", again, err, id)
	}
	for _, tc := range []struct {
		name     string
		req      wire.Exec
		wantOut  string
		wantCode int
	}{
		{"exit code", wire.Exec{Command: "echo hi; (exit 3)"}, "hi\n", 3},
		{"output in several chunks", wire.Exec{Command: "for i in 1 2 3; do echo $i; sleep 0.7; done"}, "1\n2\n3\n", 0},
		{"timeout", wire.Exec{Command: "sleep 100", Timeout: 0.5}, "", exitTimeout},
		{"missing command", wire.Exec{Command: "no-such-command-xyz 2>/dev/null"}, "", 127},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			e := &execRun{cl: c, id: id, sig: make(chan os.Signal), out: &out, stream: true}
			res, err := e.run(t.Context(), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if got := exitCodeOf(res); got != tc.wantCode {
				t.Errorf("exit code %d, want %d (%+v)", got, tc.wantCode, res)
			}
			if strings.TrimSpace(out.String()) != strings.TrimSpace(tc.wantOut) {
				t.Errorf("printed %q, want %q", out.String(), tc.wantOut)
			}
			if res.Output != out.String() {
				t.Errorf("joined result output %q differs from what was printed %q", res.Output, out.String())
			}
		})
	}
	t.Run("Ctrl-C interrupts", func(t *testing.T) {
		sig := make(chan os.Signal, 1)
		var out bytes.Buffer
		e := &execRun{cl: c, id: id, sig: sig, out: &out, stream: true}
		// The signal is already pending: the first call is abandoned at
		// once and the command interrupted, whatever state it reached.
		sig <- syscall.SIGINT
		res, err := e.run(t.Context(), wire.Exec{Command: "sleep 100"})
		if err != nil {
			t.Fatal(err)
		}
		if got := exitCodeOf(res); got != exitInterrupted {
			t.Errorf("exit code %d, want %d (%+v)", got, exitInterrupted, res)
		}
		e = &execRun{cl: c, id: id, sig: make(chan os.Signal), out: &out, stream: false}
		res, err = e.run(t.Context(), wire.Exec{Command: "echo still-usable"})
		if err != nil || res.Output != "still-usable\n" {
			t.Errorf("after the interrupt: %q, %v", res.Output, err)
		}
	})
}

func TestExitCodeOf(t *testing.T) {
	code := func(n int) *int { return &n }
	for _, tc := range []struct {
		r    wire.Result
		want int
	}{
		{wire.Result{Status: wire.StatusExited, ExitCode: code(0)}, 0},
		{wire.Result{Status: wire.StatusExited, ExitCode: code(137)}, 137},
		{wire.Result{Status: wire.StatusTimeout, ExitCode: code(130)}, 124},
		{wire.Result{Status: wire.StatusInterrupted, ExitCode: code(130)}, 130},
		{wire.Result{Status: wire.StatusInterrupted}, 130},
		{wire.Result{Status: wire.StatusRunning}, exitLimbsFailed},
	} {
		if got := exitCodeOf(tc.r); got != tc.want {
			t.Errorf("exitCodeOf(%s, %v) = %d, want %d", tc.r.Status, tc.r.ExitCode, got, tc.want)
		}
	}
}

func TestConnectFlags(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "limbsd.token"), []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := "unix://" + filepath.Join(dir, "limbsd.sock")
	if os.Geteuid() != 0 {
		// limbs serve's default state dir follows XDG only for non-root.
		if err := os.MkdirAll(filepath.Join(dir, "limbs", "serve"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "limbs", "serve", "token"), []byte("serve-token\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name      string
		env       map[string]string
		args      []string
		wantBase  string
		wantToken string
		wantErr   string
	}{
		{"token file next to the socket", nil, []string{"--addr", sock}, "http://limbs/v1", "from-file", ""},
		{"flag token wins", nil, []string{"--addr", sock, "--token", "flag"}, "http://limbs/v1", "flag", ""},
		{"env", map[string]string{"LIMBS_ADDR": "127.0.0.1:9", "LIMBS_TOKEN": "env"}, nil, "http://127.0.0.1:9/v1", "env", ""},
		{"sandbox through the control plane", map[string]string{"LIMBS_TOKEN": "t"}, []string{"--sandbox", "sb_1"}, "http://127.0.0.1:7878/v1/sandboxes/sb_1", "t", ""},
		{"sandbox token from limbs serve's state dir", map[string]string{"XDG_STATE_HOME": dir}, []string{"--sandbox", "sb_1"}, "http://127.0.0.1:7878/v1/sandboxes/sb_1", "serve-token", ""},
		{"tcp needs a token", nil, []string{"--addr", "127.0.0.1:9"}, "", "", "pass --token"},
		{"no token file", nil, []string{"--addr", "unix:///nonexistent/limbsd.sock"}, "", "", "pass --token or set LIMBS_TOKEN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env["XDG_STATE_HOME"] != "" && os.Geteuid() == 0 {
				t.Skip("as root limbs serve's state dir is /var/lib/limbs/serve, not under XDG_STATE_HOME")
			}
			for _, k := range []string{"LIMBS_ADDR", "LIMBS_TOKEN", "LIMBS_SANDBOX", "XDG_STATE_HOME"} {
				t.Setenv(k, tc.env[k])
			}
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			cn := connectFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			c, err := cn.client()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{tc.wantBase, tc.wantToken}, []string{c.Base(), c.Token()}); diff != "" {
				t.Errorf("base and token (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLogNote(t *testing.T) {
	if n := logNote(wire.Result{LogPath: "/s/c_1.log"}); n != "" {
		t.Errorf("a whole log got a note: %q", n)
	}
	n := logNote(wire.Result{LogPath: "/s/c_1.log", LogTruncated: true, LogMissing: []int64{100, 900}})
	if !strings.Contains(n, "cut") || !strings.Contains(n, "100..900") {
		t.Errorf("note of a cut log: %q", n)
	}
	n = logNote(wire.Result{LogPath: "/s/c_1.log", LogIncomplete: true, LogMissing: []int64{5, 9}, LogError: "no space left on device"})
	if !strings.Contains(n, "incomplete") || !strings.Contains(n, "5..9") || !strings.Contains(n, "no space left") {
		t.Errorf("note of an incomplete log: %q", n)
	}
}
