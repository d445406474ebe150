package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/store"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

// limbsCLI runs the real limbs binary and returns its stdout, stderr and
// exit code.
func limbsCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testbin.Path(t, "limbs", false), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running limbs %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// TestCpOutDropsSetIDAndOwners: files and directories a sandbox made
// setuid, setgid or sticky (and owned by the agent) come out of the real
// `limbs cp` with their permission bits only, owned by the user running
// it; the single-file path does the same.
func TestCpOutDropsSetIDAndOwners(t *testing.T) {
	d := testbin.StartLimbsd(t, false)
	out := filepath.Join(d.Dir, "workspace", "out")
	modes := map[string]os.FileMode{
		"suid": 0o755 | os.ModeSetuid, "sgid": 0o755 | os.ModeSetgid, "sticky": 0o777 | os.ModeSticky,
	}
	for name, m := range modes {
		mustWrite(t, filepath.Join(out, name), "#!/bin/sh\nid -u\n", m)
		dir := filepath.Join(out, name+"-dir")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		mustWrite(t, filepath.Join(dir, "f"), "x", 0o644)
		if err := os.Chmod(dir, m); err != nil {
			t.Fatal(err)
		}
	}
	if os.Geteuid() == 0 {
		_ = filepath.Walk(out, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 1000, 1000) })
	}
	dst := filepath.Join(t.TempDir(), "got")
	addr := "unix://" + d.Sock
	if _, stderr, code := limbsCLI(t, "cp", "--addr", addr, "--token", d.Token, ":"+out, dst); code != 0 {
		t.Fatalf("limbs cp of the directory: exit %d: %s", code, stderr)
	}
	single := filepath.Join(t.TempDir(), "single")
	if _, stderr, code := limbsCLI(t, "cp", "--addr", addr, "--token", d.Token, ":"+filepath.Join(out, "suid"), single); code != 0 {
		t.Fatalf("limbs cp of one file: exit %d: %s", code, stderr)
	}
	want := map[string]os.FileMode{
		"suid": 0o755, "sgid": 0o755, "sticky": 0o777,
		"suid-dir": 0o755 | os.ModeDir, "sgid-dir": 0o755 | os.ModeDir, "sticky-dir": 0o777 | os.ModeDir,
	}
	check := func(p string, wantMode os.FileMode) {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Error(err)
			return
		}
		if fi.Mode() != wantMode {
			t.Errorf("%s came out as %v, want %v (no setuid, setgid or sticky bit)", p, fi.Mode(), wantMode)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if int(st.Uid) != os.Geteuid() || int(st.Gid) != os.Getegid() {
			t.Errorf("%s is owned by %d:%d, want the caller %d:%d", p, st.Uid, st.Gid, os.Geteuid(), os.Getegid())
		}
	}
	for name, m := range want {
		check(filepath.Join(dst, name), m)
	}
	check(filepath.Join(dst, "suid-dir", "f"), 0o644)
	check(single, 0o755)
}

// hostileArchive serves a sandbox's file API whose archive of /d is the
// given tar: what an agent that answers the forwarded requests itself can
// send to `limbs cp`.
func hostileArchive(t *testing.T, archive []byte) string {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/files/list"):
			wire.WriteJSON(w, 200, wire.FileList{Entries: []wire.FileEntry{{Path: "/d", Name: "d", Type: "dir"}}})
		case strings.HasSuffix(r.URL.Path, "/files/archive"):
			_, _ = w.Write(archive)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(hs.Close)
	return hs.URL
}

func tarOf(t *testing.T, hdrs ...*tar.Header) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hdrs {
		if h.Typeflag == tar.TypeReg {
			h.Size = 1
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			_, _ = tw.Write([]byte("x"))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestCpOutRefusesHostileArchives: through the real binary, an archive
// that writes through a symlink it placed (or one at the destination) is
// refused naming the entry, with nothing written outside; device nodes and
// fifos are skipped with a message; owners in the archive are not used.
func TestCpOutRefusesHostileArchives(t *testing.T) {
	outside := t.TempDir()
	t.Run("symlink then an entry through it", func(t *testing.T) {
		addr := hostileArchive(t, tarOf(t,
			&tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: outside},
			&tar.Header{Name: "link/planted", Typeflag: tar.TypeReg, Mode: 0o4755},
		))
		dst := filepath.Join(t.TempDir(), "dst")
		_, stderr, code := limbsCLI(t, "cp", "--addr", addr, "--token", "x", ":/d", dst)
		if code == 0 || !strings.Contains(stderr, `"link/planted"`) || !strings.Contains(stderr, "symlink") {
			t.Errorf("exit %d, stderr %q; want a refusal naming link/planted", code, stderr)
		}
		if _, err := os.Lstat(filepath.Join(outside, "planted")); err == nil {
			t.Errorf("the archive wrote through its symlink")
		}
	})
	t.Run("symlink inside the destination, then through it", func(t *testing.T) {
		// A symlink to a directory inside the destination is still a
		// symlink the sandbox chose: never followed.
		addr := hostileArchive(t, tarOf(t,
			&tar.Header{Name: "real", Typeflag: tar.TypeDir, Mode: 0o755},
			&tar.Header{Name: "alias", Typeflag: tar.TypeSymlink, Linkname: "real"},
			&tar.Header{Name: "alias/f", Typeflag: tar.TypeReg, Mode: 0o644},
		))
		dst := filepath.Join(t.TempDir(), "dst")
		if _, stderr, code := limbsCLI(t, "cp", "--addr", addr, "--token", "x", ":/d", dst); code == 0 || !strings.Contains(stderr, `"alias/f"`) {
			t.Errorf("exit %d, stderr %q; want a refusal naming alias/f", code, stderr)
		}
	})
	t.Run("symlink already at the destination", func(t *testing.T) {
		// dst exists, so /d lands in dst/d, where a symlink waits.
		dst := filepath.Join(t.TempDir(), "dst")
		if err := os.MkdirAll(filepath.Join(dst, "d"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, filepath.Join(dst, "d", "there")); err != nil {
			t.Fatal(err)
		}
		addr := hostileArchive(t, tarOf(t, &tar.Header{Name: "there/x", Typeflag: tar.TypeReg, Mode: 0o644}))
		if _, stderr, code := limbsCLI(t, "cp", "--addr", addr, "--token", "x", ":/d", dst); code == 0 || !strings.Contains(stderr, "there/x") {
			t.Errorf("exit %d, stderr %q; want a refusal naming there/x", code, stderr)
		}
		if _, err := os.Lstat(filepath.Join(outside, "x")); err == nil {
			t.Errorf("the archive wrote through a symlink at the destination")
		}
	})
	t.Run("devices and fifos skipped, owners ignored", func(t *testing.T) {
		addr := hostileArchive(t, tarOf(t,
			&tar.Header{Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3, Mode: 0o666},
			&tar.Header{Name: "sda", Typeflag: tar.TypeBlock, Devmajor: 8, Devminor: 0, Mode: 0o666},
			&tar.Header{Name: "pipe", Typeflag: tar.TypeFifo, Mode: 0o666},
			&tar.Header{Name: "owned", Typeflag: tar.TypeReg, Mode: 0o6755, Uid: 0, Gid: 0, Uname: "root"},
			&tar.Header{Name: "mine", Typeflag: tar.TypeReg, Mode: 0o644, Uid: 4242, Gid: 4242},
		))
		dst := filepath.Join(t.TempDir(), "dst")
		_, stderr, code := limbsCLI(t, "cp", "--addr", addr, "--token", "x", ":/d", dst)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		for _, n := range []string{"null", "sda", "pipe"} {
			if _, err := os.Lstat(filepath.Join(dst, n)); err == nil {
				t.Errorf("%s was created", n)
			}
			if !strings.Contains(stderr, "skipped "+n) {
				t.Errorf("no message about skipping %s in %q", n, stderr)
			}
		}
		for _, n := range []string{"owned", "mine"} {
			fi, err := os.Lstat(filepath.Join(dst, n))
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			if fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || int(st.Uid) != os.Geteuid() {
				t.Errorf("%s: %v owned by %d; want plain permission bits owned by %d", n, fi.Mode(), st.Uid, os.Geteuid())
			}
		}
	})
}

// TestLsEscapesRegistryNames: a registry written before names were
// checked (an old database) holds a name with escape sequences, a NUL and
// a newline; `limbs sandbox ls`, `inspect` and `events` print them as
// visible escapes, never raw.
func TestLsEscapesRegistryNames(t *testing.T) {
	dir, err := os.MkdirTemp("", "esc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	evil := "x\x1b]0;pwned\x07\x1b[31m\x00\nred\u009b1m\u202e"
	db, err := store.Open(filepath.Join(dir, "limbs.db"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	rec := store.Record{ID: "sb_evil", Name: evil, Provider: "inproc", Image: "img\x1b[2J", Status: wire.SandboxRunning,
		Desired: "stopped", Reason: "r\x1b[5m", Message: "m\x1b]2;t\x07", CreatedAt: now, UpdatedAt: now}
	if err := db.Put(rec, store.Event{Time: now, Kind: "created", Reason: "why\x1b[1m", Message: "said\x1b]0;x\x07"}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	ts, _ := inProcessServe(t, dir, nil)
	for _, args := range [][]string{{"ls"}, {"ls", "--json"}, {"inspect", "sb_evil"}, {"events", "sb_evil"}} {
		full := append([]string{"sandbox", args[0], "--addr", ts.URL, "--token", "tok"}, args[1:]...)
		out, stderr, code := limbsCLI(t, full...)
		if code != 0 {
			t.Errorf("limbs %v: exit %d: %s", args, code, stderr)
		}
		for _, raw := range []string{"\x1b", "\x00", "\x07", "\u009b", "\u202e", "x\nred"} {
			if strings.Contains(out, raw) {
				t.Errorf("limbs sandbox %v printed %q raw:\n%q", args, raw, out)
			}
		}
		if args[0] == "ls" && len(args) == 1 && !strings.Contains(out, `x\x1b]0;pwned\x07\x1b[31m\x00\nred\u009b1m\u202e`) {
			t.Errorf("ls does not show the name escaped:\n%s", out)
		}
	}
}

func TestSafe(t *testing.T) {
	for in, want := range map[string]string{
		"plain name-1.2": "plain name-1.2",
		"é ünïcode ✓":    "é ünïcode ✓",
		"a\x1b[31mb":     `a\x1b[31mb`,
		"a\x00b\nc\td":   `a\x00b\nc\td`,
		"\x7f\u009b":     `\u007f\u009b`,
		"bidi\u202e":     `bidi\u202e`,
		"bad\xffutf8":    `bad\xffutf8`,
	} {
		if got := safe(in); got != want {
			t.Errorf("safe(%q) = %q, want %q", in, got, want)
		}
	}
	if got := safeJSON(`{"a":"x` + "\u009b" + `"}` + "\n"); got != `{"a":"x\u009b"}`+"\n" {
		t.Errorf("safeJSON: %q", got)
	}
}

// realServe runs the real `limbs serve` (local provider) on a free
// 127.0.0.1 port with extra flags and returns its address and process.
func realServe(t *testing.T, flags ...string) (string, *os.Process) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	proc, _ := startServe(t, addr, flags...)
	// No kept-alive connection is left behind: tests count the server's
	// open connections.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	testbin.Eventually(t, "limbs serve answers", 30*time.Second, func() bool {
		resp, err := hc.Get("http://" + addr + "/v1/health")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	return addr, proc
}

// startServe starts the real `limbs serve` (local provider, token "tok")
// listening on listen with extra flags, and stops it (SIGTERM, then
// SIGKILL after 10 s) when the test ends; its output is in the buffer,
// and is logged when the test failed.
func startServe(t *testing.T, listen string, flags ...string) (*os.Process, *testbin.Buffer) {
	t.Helper()
	limbs := testbin.Path(t, "limbs", false)
	limbsd := testbin.Path(t, "limbsd", false)
	state, err := os.MkdirTemp("", "serve")
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"serve", "--listen", listen, "--token", "tok", "--state-dir", state,
		"--provider", "local", "--limbsd", limbsd}, flags...)
	cmd := exec.Command(limbs, args...)
	logs := &testbin.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		os.RemoveAll(state)
		if t.Failed() {
			t.Logf("limbs serve output:\n%s", logs.String())
		}
	})
	return cmd.Process, logs
}

// vmRSS is the resident memory of process pid in KiB.
func vmRSS(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestServeClosesIdleConnections: 3,000 connections to a real limbs serve
// that each asked for health without a token and then stay idle are all
// closed by the server: those past --max-conns at once with a 503, the
// others after --idle-timeout. None is held. Then a connection past a cap
// of 50 held ones is refused at once.
func TestServeClosesIdleConnections(t *testing.T) {
	addr, _ := realServe(t, "--idle-timeout", "2s", "--header-timeout", "2s", "--max-conns", "2000")
	const n = 3000
	var (
		wg                   sync.WaitGroup
		mu                   sync.Mutex
		held, refused, idled int
		errs                 []string
	)
	sem := make(chan struct{}, 300) // dials in flight
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			c, err := net.DialTimeout("tcp", addr, 10*time.Second)
			<-sem
			if err != nil {
				mu.Lock()
				errs = append(errs, err.Error())
				mu.Unlock()
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(60 * time.Second))
			_, _ = io.WriteString(c, "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			status := 0
			if err == nil {
				status = resp.StatusCode
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			// Now idle: the server must close the connection.
			_, err = br.ReadByte()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil && os.IsTimeout(err):
				held++
			case status == http.StatusServiceUnavailable:
				refused++
			default:
				idled++
			}
		}()
	}
	wg.Wait()
	t.Logf("%d connections: %d closed when idle, %d refused past --max-conns, %d held, %d dial errors", n, idled, refused, held, len(errs))
	if held > 0 {
		t.Errorf("%d idle connections were still open after 60 s", held)
	}
	if len(errs) > 0 {
		t.Errorf("%d dials failed, first: %s", len(errs), errs[0])
	}
	if idled == 0 {
		t.Errorf("no connection was closed for being idle")
	}

	// The cap itself, with timeouts long enough that nothing frees a
	// place meanwhile: 50 connections that each had a request answered
	// (so the server has surely accepted and counted them) and now idle,
	// and the 51st is answered 503 and closed at once.
	addr, _ = realServe(t, "--idle-timeout", "10m", "--header-timeout", "10m", "--max-conns", "50")
	for i := 0; i < 50; i++ {
		c, err := net.DialTimeout("tcp", addr, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		_, _ = io.WriteString(c, "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("held connection %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("held connection %d: status %d, want 200 (is another connection open?)", i, resp.StatusCode)
		}
	}
	c, err := net.DialTimeout("tcp", addr, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("the 51st connection: %v, want a 503 answer", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("the 51st connection: status %d, want 503", resp.StatusCode)
	}
}

// TestServeSlowHeaderCut: a client that sends its headers a byte at a time
// (slowloris) is cut after --header-timeout.
func TestServeSlowHeaderCut(t *testing.T) {
	addr, _ := realServe(t, "--header-timeout", "2s")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// 8 s of header at 2 bytes a second: cut by a 2 s --header-timeout
	// (the old fixed 10 s let it through).
	head := "GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 16)
	head = head[len(head)-16:]
	if _, err := io.WriteString(c, "GET /v1/health HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(head); i++ {
		if _, err := c.Write([]byte{head[i]}); err != nil {
			return // cut: the write fails once the server closed
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Errorf("sent %d header bytes over %v without being cut", len(head), time.Duration(len(head))*500*time.Millisecond)
}

// TestServeRefusesLargeBodyUnread: a 100 MB body with a Content-Length is
// answered 413 at once and serve's memory does not grow with it.
func TestServeRefusesLargeBodyUnread(t *testing.T) {
	addr, proc := realServe(t)
	before := vmRSS(t, proc.Pid)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	const size = 100 << 20
	head := fmt.Sprintf("POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"image\":\"", size)
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(c, io.LimitReader(letters{}, size-11)) }()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a 100 MB body: %v", err)
	}
	resp.Body.Close()
	after := vmRSS(t, proc.Pid)
	t.Logf("serve VmRSS %d KiB before, %d KiB after a 100 MB body (growth %d KiB); answer %s", before, after, after-before, resp.Status)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("answer %s, want 413", resp.Status)
	}
	if after-before > 20<<10 {
		t.Errorf("serve grew by %d KiB reading a body it refuses; want it refused unread", after-before)
	}
}

type letters struct{}

func (letters) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

// TestServeListenPortZero: with --listen 127.0.0.1:0 limbs serve says
// which port it got, in the listening and the dashboard lines, and
// answers there.
func TestServeListenPortZero(t *testing.T) {
	_, logs := startServe(t, "127.0.0.1:0")
	re := regexp.MustCompile(`listening on 127\.0\.0\.1:(\d+) `)
	var port string
	testbin.Eventually(t, "limbs serve says where it listens", 30*time.Second, func() bool {
		if m := re.FindStringSubmatch(logs.String()); m != nil {
			port = m[1]
		}
		return port != ""
	})
	if port == "0" {
		t.Fatalf("limbs serve says it listens on port 0:\n%s", logs.String())
	}
	addr := "127.0.0.1:" + port
	testbin.Eventually(t, "the dashboard line names the port", 10*time.Second, func() bool {
		return strings.Contains(logs.String(), "dashboard at http://"+addr+"/")
	})
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get("http://" + addr + "/v1/health")
	if err != nil {
		t.Fatalf("GET /v1/health on the port it named: %v\n%s", err, logs.String())
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/health on %s: %s", addr, resp.Status)
	}
}
