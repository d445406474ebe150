package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/limbs-dev/limbs/internal/screen"
	"github.com/limbs-dev/limbs/internal/testbin"
	"github.com/limbs-dev/limbs/internal/wire"
)

// limbsd starts a real limbsd and returns the connection flags for it.
func limbsdFlags(t *testing.T) []string {
	t.Helper()
	d := testbin.StartLimbsd(t, false)
	return []string{"--addr", "unix://" + d.Sock, "--token", d.Token}
}

// startLimbs starts the real limbs binary in the background; wait returns
// its stdout, stderr and exit code.
func startLimbs(t *testing.T, args ...string) (*exec.Cmd, func() (string, string, int)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	cmd := exec.CommandContext(ctx, testbin.Path(t, "limbs", false), args...)
	var out, errb testbin.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := false
	wait := func() (string, string, int) {
		defer cancel()
		err := cmd.Wait()
		done = true
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("limbs %v: %v", args, err)
		}
		return out.String(), errb.String(), code
	}
	t.Cleanup(func() {
		if !done {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			cancel()
		}
	})
	return cmd, wait
}

// untilRunning waits until the session runs a command (limbs screen shows
// the marker the command printed).
func untilScreen(t *testing.T, flags []string, session, want string) {
	t.Helper()
	testbin.Eventually(t, "the session's screen shows "+want, 30*time.Second, func() bool {
		out, _, _ := limbsCLI(t, append([]string{"screen", "--session", session}, flags...)...)
		return strings.Contains(out, want)
	})
}

// TestExecSIGTERMInterrupts: SIGTERM to limbs exec (a framework's
// subprocess timeout) interrupts the remote command, exits 143, and
// leaves the session free for the next command.
func TestExecSIGTERMInterrupts(t *testing.T) {
	flags := limbsdFlags(t)
	cmd, wait := startLimbs(t, append([]string{"exec", "--session", "term"}, append(flags, "--", "echo started; sleep 300; echo after")...)...)
	untilScreen(t, flags, "term", "started")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := wait()
	if code != exitTerminated {
		t.Errorf("limbs exec after SIGTERM exited %d, want %d; stdout %q stderr %q", code, exitTerminated, out, stderr)
	}
	if strings.Contains(out, "after") {
		t.Errorf("the command went on after the interrupt: %q", out)
	}
	out, stderr, code = limbsCLI(t, append([]string{"exec", "--session", "term"}, append(flags, "--", "echo free")...)...)
	if code != 0 || out != "free\n" {
		t.Errorf("next exec: exit %d, %q, %q; want the session free", code, out, stderr)
	}
}

// TestExecTypesStdin: piped stdin is typed into the command, followed by
// end of file, so that the command reads it all and ends.
func TestExecTypesStdin(t *testing.T) {
	flags := limbsdFlags(t)
	for _, tc := range []struct{ name, in, want string }{
		{"lines", "one\ntwo\n", "lines=2 bytes=8"},
		{"no final newline", "one\ntwo", "lines=1 bytes=7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(testbin.Path(t, "limbs", false), append([]string{"exec", "--session", "in"}, append(flags, "--",
				`cat > /tmp/limbs-stdin-$$; echo "lines=$(wc -l < /tmp/limbs-stdin-$$) bytes=$(wc -c < /tmp/limbs-stdin-$$)"; rm -f /tmp/limbs-stdin-$$`)...)...)
			cmd.Stdin = strings.NewReader(tc.in)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			done := make(chan error, 1)
			go func() { done <- cmd.Run() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("limbs exec with stdin: %v; %q %q", err, out.String(), errb.String())
				}
			case <-time.After(time.Minute):
				_ = cmd.Process.Kill()
				t.Fatalf("limbs exec with stdin did not end: %q %q", out.String(), errb.String())
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Errorf("output %q, want it to contain %q", out.String(), tc.want)
			}
		})
	}
}

// TestTokenNeverPrinted: the token from LIMBS_TOKEN appears in no usage
// or error text (it used to be printed as the --token flag's default).
func TestTokenNeverPrinted(t *testing.T) {
	const secret = "s3cret-token-value"
	for _, args := range [][]string{
		{"exec", "-h"}, {"exec", "--no-such-flag"}, {"shell", "-h"}, {"cp", "--bogus"},
		{"sandbox", "ls", "-h"}, {"sandbox", "create", "--bogus"}, {"serve", "-h"},
		{"wait", "-h"}, {"input", "--bogus"}, {"screen", "-h"}, {"interrupt", "-h"},
	} {
		cmd := exec.Command(testbin.Path(t, "limbs", false), args...)
		cmd.Env = append(cmd.Environ(), "LIMBS_TOKEN="+secret)
		out, _ := cmd.CombinedOutput()
		if strings.Contains(string(out), secret) {
			t.Errorf("limbs %v prints the token:\n%s", args, out)
		}
	}
}

// TestFollowVerbs: the verbs the busy error names exist and work: a
// second exec is refused with hints naming them (and --sandbox when one
// was used), limbs input answers a prompt, limbs wait and limbs
// interrupt follow and stop a command.
func TestFollowVerbs(t *testing.T) {
	flags := limbsdFlags(t)
	s := func(verb string, rest ...string) []string {
		return append(append([]string{verb, "--session", "v"}, flags...), rest...)
	}
	_, wait := startLimbs(t, s("exec", "--", `read -p "name? " n; echo "hello $n"; exit 4`)...)
	untilScreen(t, flags, "v", "name?")
	_, stderr, code := limbsCLI(t, s("exec", "--", "true")...)
	for _, want := range []string{"limbs wait --session v", "limbs input --session v", "limbs interrupt --session v"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("busy error %q (exit %d) does not name %q", stderr, code, want)
		}
	}
	out, stderr, code := limbsCLI(t, s("input", "bob")...)
	// The first limbs exec follows the same command: the new output goes
	// to whichever of the two results is made first.
	wout, _, wcode := wait()
	if code != 4 || !strings.Contains(out+wout, "hello bob") {
		t.Errorf("limbs input bob: exit %d, %q, %q (the first exec printed %q); want exit 4 and hello bob", code, out, stderr, wout)
	}
	if wcode != 4 {
		t.Errorf("the first limbs exec exited %d, want the command's 4", wcode)
	}

	_, wait = startLimbs(t, s("exec", "--", "echo begun; sleep 300")...)
	untilScreen(t, flags, "v", "begun")
	_, _, code = limbsCLI(t, s("interrupt")...)
	if code != exitInterrupted {
		t.Errorf("limbs interrupt exited %d, want %d", code, exitInterrupted)
	}
	wait()
	_, stderr, code = limbsCLI(t, s("wait")...)
	if code == 0 || !strings.Contains(stderr, "limbs exec --session v") {
		t.Errorf("limbs wait with nothing running: exit %d, %q; want an error naming limbs exec", code, stderr)
	}
	_, stderr, _ = limbsCLI(t, "input", "--sandbox", "box9", "--session", "v", "--addr", "127.0.0.1:9", "--token", "x", "hi")
	if strings.Contains(stderr, "unknown") || strings.Contains(stderr, "flag provided but not defined") {
		t.Errorf("limbs input --sandbox: %q", stderr)
	}
}

// TestHintNamesSandbox: the next-step hints carry --sandbox when one was
// used.
func TestHintNamesSandbox(t *testing.T) {
	c := &conn{sandbox: "dev", sessionName: "main"}
	if got, want := c.hint("wait"), "limbs wait --sandbox dev --session main"; got != want {
		t.Errorf("hint = %q, want %q", got, want)
	}
}

// TestExecRendersCarriageReturns: a \r progress bar spread over several
// results prints, and joins in --json, as a terminal shows it.
func TestExecRendersCarriageReturns(t *testing.T) {
	flags := limbsdFlags(t)
	bar := `for i in 1 2 3 4 5; do printf '\rstep %d/5' $i; sleep 0.6; done; echo`
	out, stderr, code := limbsCLI(t, append(append([]string{"exec", "--json", "--session", "cr"}, flags...), "--", bar)...)
	var res wire.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 {
		t.Fatalf("limbs exec --json: exit %d, %v: %q %q", code, err, out, stderr)
	}
	if res.Output != "step 5/5\n" {
		t.Errorf("--json output %q, want %q", res.Output, "step 5/5\n")
	}
	out, _, _ = limbsCLI(t, append(append([]string{"exec", "--session", "cr"}, flags...), "--", bar)...)
	if got := screen.Clean([]byte(out)); got != "step 5/5\n" {
		t.Errorf("printed %q, which a terminal shows as %q; want %q", out, got, "step 5/5\n")
	}
}
