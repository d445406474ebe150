package runtime_test

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// floodCommand prints mib MiB of 'a's as lines of 100: on the terminal
// every line but the last is 100 'a's and \r\n.
func floodCommand(mib int) string {
	return "head -c " + strconv.Itoa(mib) + "M /dev/zero | tr '\\0' 'a' | fold -w 100"
}

// floodBytes is the terminal output of floodCommand(mib): its [from, to).
func floodBytes(from, to int64) []byte {
	line := append(bytes.Repeat([]byte("a"), 100), '\r', '\n')
	out := make([]byte, 0, to-from)
	for off := from; off < to; {
		i := off % int64(len(line))
		n := min(int64(len(line))-i, to-off)
		out = append(out, line[i:i+n]...)
		off += n
	}
	return out
}

// diskUsage is what the files under dir take on disk (st_blocks, as du
// counts them), walked without following links. The event journal
// (dir/journal) is left out: it has bounds of its own (--journal-max-disk,
// --journal-max-output-disk), on top of the sessions' (docs/api.md).
func diskUsage(t *testing.T, dir string) int64 {
	t.Helper()
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path == filepath.Join(dir, "journal") {
			return filepath.SkipDir
		}
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && !fi.IsDir() {
			total += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		t.Fatalf("measuring %s: %v", dir, err)
	}
	return total
}

func readOutput(t *testing.T, c *client.Client, id string, from, to int64) ([]byte, error) {
	t.Helper()
	rc, err := c.Output(t.Context(), id, from, to)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// checkFlood runs a flood of mib MiB in a daemon bounded to sessionBound
// bytes per session and checks the state directory, the result, the log's
// head and tail, and the answers for the missing range.
func checkFlood(t *testing.T, d *daemon, mib int, sessionBound int64) {
	c := d.client(t, testToken)
	sess, err := c.CreateSession(t.Context(), wire.CreateSession{})
	if err != nil {
		t.Fatal(err)
	}
	yield := 0.0
	r, err := c.Exec(t.Context(), sess.ID, wire.Exec{Command: floodCommand(mib), YieldAfter: &yield})
	if err != nil {
		t.Fatal(err)
	}
	// fold ends no line after the last one.
	n := int64(mib) << 20
	total := n + 2*((n+99)/100-1)
	if r.ExitCode == nil || *r.ExitCode != 0 || r.OutputBytes != total {
		t.Fatalf("flood result: exit %v, output_bytes %d (want 0, %d)", r.ExitCode, r.OutputBytes, total)
	}
	state := filepath.Join(d.dir, "state")
	if du := diskUsage(t, state); du > sessionBound+256<<10 {
		t.Errorf("the state directory takes %d bytes on disk after %d MiB of output, over the bound of %d", du, mib, sessionBound)
	}
	head := sessionBound / 8
	want := []int64{r.OffsetStart + head, r.OffsetEnd - head}
	if !r.LogTruncated || len(r.LogMissing) != 2 || r.LogMissing[0] != want[0] || r.LogMissing[1] != want[1] {
		t.Fatalf("result says log_truncated %v, log_missing %v; want true, %v", r.LogTruncated, r.LogMissing, want)
	}
	if r.LogIncomplete {
		t.Errorf("a log cut by the bound is not incomplete: %s", r.LogError)
	}
	log, err := os.ReadFile(r.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(log)) != 2*head {
		t.Fatalf("the log holds %d bytes, want its head and tail, %d", len(log), 2*head)
	}
	if !bytes.Equal(log[:head], floodBytes(0, head)) {
		t.Errorf("the log's head is not the first %d bytes of the output", head)
	}
	if !bytes.Equal(log[head:], floodBytes(total-head, total)) {
		t.Errorf("the log's tail is not the last %d bytes of the output", head)
	}
	// The stream keeps the head and the newest output, not the middle.
	got, err := readOutput(t, c, sess.ID, r.OffsetStart, r.OffsetStart+head)
	if err != nil || !bytes.Equal(got, floodBytes(0, head)) {
		t.Errorf("GET /output of the head: %d bytes, %v; want the first %d bytes of the output", len(got), err, head)
	}
	got, err = readOutput(t, c, sess.ID, r.OffsetEnd-head, r.OffsetEnd)
	if err != nil || !bytes.Equal(got, floodBytes(total-head, total)) {
		t.Errorf("GET /output of the tail: %d bytes, %v; want the last %d bytes of the output", len(got), err, head)
	}
	mid := r.OffsetStart + total/2
	got, err = readOutput(t, c, sess.ID, mid, mid+1000)
	var re *wire.RemoteError
	if !errors.Is(err, wire.ErrGone) || !errors.As(err, &re) || len(re.Missing) != 2 || re.Missing[0] > mid || re.Missing[1] < mid+1000 {
		t.Fatalf("GET /output of %d..%d in the middle of the flood: %d bytes, err %v; want 410 gone naming a missing range around it", mid, mid+1000, len(got), err)
	}
	if !strings.Contains(re.Message, strconv.FormatInt(re.Missing[0], 10)) || !strings.Contains(re.Message, strconv.FormatInt(re.Missing[1], 10)) {
		t.Errorf("the gone message does not name the bytes %v: %s", re.Missing, re.Message)
	}
	// The session goes on.
	r, err = c.Exec(t.Context(), sess.ID, wire.Exec{Command: "echo still here"})
	if err != nil || r.Output != "still here\n" || r.LogTruncated {
		t.Fatalf("after the flood: %+v, %v", r, err)
	}
}

// TestLimbsdDiskBound is issue 9 defect 7 with small bounds: 50 MiB of
// output in a daemon bounded to 4 MiB per session.
func TestLimbsdDiskBound(t *testing.T) {
	d := startDaemon(t, "--token", testToken, "--max-session-disk", "4MiB", "--max-disk", "64MiB")
	checkFlood(t, d, 50, 4<<20)
}

// TestLimbsdGigabyteFloodBound is defect 7 as filed: 1 GiB of output, with
// the default bounds, through the limbsd shipped (not the race build).
func TestLimbsdGigabyteFloodBound(t *testing.T) {
	if testing.Short() {
		t.Skip("a gigabyte of output; runs without -short")
	}
	dir, err := os.MkdirTemp("", "limbsd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := startDaemonBin(t, testbin.Path(t, "limbsd", false), dir, "--token", testToken)
	checkFlood(t, d, 1024, 256<<20)
}

// TestLimbsdDiskFull is defect 7's full disk: the state directory on an
// 8 MiB tmpfs (well under the default bounds), 50 MiB of output.
func TestLimbsdDiskFull(t *testing.T) {
	dir, err := os.MkdirTemp("", "limbsd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", state, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size=8m,mode=0700"); err != nil {
		if errors.Is(err, syscall.EPERM) {
			t.Skipf("mounting a small tmpfs as the full disk needs root (CAP_SYS_ADMIN): %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(state, syscall.MNT_DETACH) })
	d := startDaemonAt(t, dir, "", "--token", testToken)
	c := d.client(t, testToken)
	sess, err := c.CreateSession(t.Context(), wire.CreateSession{})
	if err != nil {
		t.Fatal(err)
	}
	yield := 0.0
	r, err := c.Exec(t.Context(), sess.ID, wire.Exec{Command: floodCommand(50), YieldAfter: &yield})
	if err != nil {
		t.Fatalf("the flood's result did not arrive: %v", err)
	}
	if r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("flood result: exit %v", r.ExitCode)
	}
	if !r.LogIncomplete || !strings.Contains(r.LogError, "no space left") || len(r.LogMissing) != 2 || r.LogMissing[1] != r.OffsetEnd {
		t.Fatalf("result on a full disk: log_incomplete %v, log_missing %v, log_error %q; want true, up to offset_end %d, naming the full disk", r.LogIncomplete, r.LogMissing, r.LogError, r.OffsetEnd)
	}
	fi, err := os.Stat(r.LogPath)
	if err == nil && fi.Size() != r.LogMissing[0]-r.OffsetStart {
		t.Errorf("the log holds %d bytes; the result says it holds %d..%d", fi.Size(), r.OffsetStart, r.LogMissing[0])
	}
	_, err = readOutput(t, c, sess.ID, r.OffsetStart, r.OffsetEnd)
	var re *wire.RemoteError
	if !errors.Is(err, wire.ErrGone) || !errors.As(err, &re) || len(re.Missing) != 2 {
		t.Fatalf("GET /output of the whole flood on a full disk: %v; want 410 gone naming the lost bytes", err)
	}
	got, err := readOutput(t, c, sess.ID, re.Missing[0]-100, re.Missing[0])
	if err != nil || !bytes.Equal(got, floodBytes(re.Missing[0]-100-r.OffsetStart, re.Missing[0]-r.OffsetStart)) {
		t.Errorf("the bytes before the lost range: %q, %v", got, err)
	}
	// limbsd goes on, and so does the session.
	r, err = c.Exec(t.Context(), sess.ID, wire.Exec{Command: "echo still here"})
	if err != nil || r.Output != "still here\n" {
		t.Fatalf("after the full disk: %+v, %v", r, err)
	}
}

// startDaemonBin is startDaemonAt with a given limbsd binary.
func startDaemonBin(t *testing.T, bin, dir string, extra ...string) *daemon {
	t.Helper()
	args := append([]string{
		"--listen", "unix://" + filepath.Join(dir, "limbsd.sock"),
		"--workdir", filepath.Join(dir, "work"),
		"--state-dir", filepath.Join(dir, "state"),
	}, extra...)
	d := &daemon{cmd: exec.Command(bin, args...), dir: dir, stderr: &testbin.Buffer{}, exited: make(chan struct{})}
	d.cmd.Stderr = d.stderr
	d.cmd.Env = append(os.Environ(), "LIMBS_TOKEN=")
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("starting limbsd: %v", err)
	}
	go func() { d.cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() {
		d.stop(t)
		if t.Failed() {
			t.Logf("limbsd log:\n%s", d.stderr.String())
		}
	})
	return d
}

// TestLimbsdDiskBoundAcrossRestart: a limbsd restarted on the state of a
// cut stream finds the holes again (it must not serve them as zeros) and
// keeps within the bound.
func TestLimbsdDiskBoundAcrossRestart(t *testing.T) {
	d := startDaemon(t, "--token", testToken, "--max-session-disk", "4MiB")
	c := d.client(t, testToken)
	sess, err := c.CreateSession(t.Context(), wire.CreateSession{})
	if err != nil {
		t.Fatal(err)
	}
	yield := 0.0
	r, err := c.Exec(t.Context(), sess.ID, wire.Exec{Command: floodCommand(30), YieldAfter: &yield})
	if err != nil || !r.LogTruncated {
		t.Fatalf("flood: %+v, %v", r, err)
	}
	d.stop(t)
	d = startDaemonAt(t, d.dir, "", "--token", testToken, "--max-session-disk", "4MiB")
	c = d.client(t, testToken)
	mid := r.OffsetStart + (r.OffsetEnd-r.OffsetStart)/2
	got, err := readOutput(t, c, sess.ID, mid, mid+4096)
	if !errors.Is(err, wire.ErrGone) {
		t.Fatalf("after a restart, GET /output of %d..%d in the cut middle: %d bytes (%q...), err %v; want 410 gone", mid, mid+4096, len(got), got[:min(len(got), 20)], err)
	}
	head := int64(4<<20) / 8
	got, err = readOutput(t, c, sess.ID, r.OffsetStart, r.OffsetStart+head)
	if err != nil || !bytes.Equal(got, floodBytes(0, head)) {
		t.Errorf("after a restart, the head: %d bytes, %v", len(got), err)
	}
	r, err = c.Exec(t.Context(), sess.ID, wire.Exec{Command: floodCommand(20), YieldAfter: &yield})
	if err != nil || !r.LogTruncated {
		t.Fatalf("second flood: %+v, %v", r, err)
	}
	if du := diskUsage(t, filepath.Join(d.dir, "state")); du > 4<<20+256<<10 {
		t.Errorf("after a restart and a second flood the state directory takes %d bytes, over the bound of 4 MiB", du)
	}
}

// TestLimbsdDiskBoundPerDaemon: two sessions flooding stay within the
// daemon's bound together, and many commands within the session's.
func TestLimbsdDiskBoundPerDaemon(t *testing.T) {
	d := startDaemon(t, "--token", testToken, "--max-session-disk", "4MiB", "--max-disk", "5MiB")
	c := d.client(t, testToken)
	yield := 0.0
	var ids []string
	for range 2 {
		sess, err := c.CreateSession(t.Context(), wire.CreateSession{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sess.ID)
		if _, err := c.Exec(t.Context(), sess.ID, wire.Exec{Command: floodCommand(20), YieldAfter: &yield}); err != nil {
			t.Fatal(err)
		}
	}
	state := filepath.Join(d.dir, "state")
	if du := diskUsage(t, state); du > 5<<20+256<<10 {
		t.Errorf("two sessions take %d bytes on disk, over the daemon's bound of 5 MiB", du)
	}
	// Many commands of 700 KB each: their logs stay whole, the oldest go.
	var last wire.Result
	for range 8 {
		r, err := c.Exec(t.Context(), ids[0], wire.Exec{Command: "head -c 700K /dev/zero | tr '\\0' 'a' | fold -w 100", YieldAfter: &yield})
		if err != nil || r.LogTruncated || r.LogIncomplete {
			t.Fatalf("a 700 KB command: log_truncated %v, log_incomplete %v, log_missing %v, log_error %q, err %v", r.LogTruncated, r.LogIncomplete, r.LogMissing, r.LogError, err)
		}
		last = r
	}
	if du := diskUsage(t, state); du > 5<<20+256<<10 {
		t.Errorf("after many commands the state directory takes %d bytes, over the daemon's bound of 5 MiB", du)
	}
	testbin.Eventually(t, "the newest log is written", 10*1e9, func() bool {
		fi, err := os.Stat(last.LogPath)
		return err == nil && fi.Size() == last.OutputBytes
	})
	// The session deleted, its bytes are free for the other one.
	if err := c.DeleteSession(t.Context(), ids[0]); err != nil {
		t.Fatal(err)
	}
	r, err := c.Exec(t.Context(), ids[1], wire.Exec{Command: floodCommand(20), YieldAfter: &yield})
	if err != nil || r.LogIncomplete {
		t.Fatalf("after deleting the other session: log_incomplete %v, log_error %q, err %v", r.LogIncomplete, r.LogError, err)
	}
}
