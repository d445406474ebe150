package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/testbin"
)

// TestREADMEAgentTranscript (acceptance 6): the transcript of limbs agent
// in README.md is what its commands print: its limbs agent command runs
// the fake model server's fix.json as the README says, and every line of
// the transcript (but those with paths, times and token counts, which
// differ from machine to machine) appears in the output, in order.
func TestREADMEAgentTranscript(t *testing.T) {
	if testing.Short() {
		t.Skip("runs limbsd and limbs agent")
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "    bin/limbs agent \"The test of calc fails")
	end := strings.Index(readme, "With a real model")
	if start < 0 || end < start {
		t.Fatal("README.md has no transcript of limbs agent with the fake model server")
	}
	block := readme[start:end]
	if !strings.Contains(block, "--fake-model internal/agent/fakellm/testdata/fix.json") || !strings.Contains(block, calcTask) {
		t.Fatalf("the README's command is not the one this test runs:\n%s", block)
	}
	var want []string
	in := false
	for _, l := range strings.Split(block, "\n") {
		if l != "" && !strings.HasPrefix(l, "    ") {
			break // the end of the indented block
		}
		l = strings.TrimPrefix(l, "    ")
		if strings.HasPrefix(l, "> ") {
			in = true
		}
		if !in || strings.TrimSpace(l) == "" || strings.Contains(l, "/tmp/limbs/work") || strings.Contains(l, "tokens)") || strings.Contains(l, " took ") {
			continue
		}
		want = append(want, strings.TrimRight(l, " "))
	}
	if len(want) < 10 {
		t.Fatalf("only %d lines of transcript found in README.md", len(want))
	}
	d := testbin.StartLimbsd(t, false)
	cl, err := client.New("unix://"+d.Sock, d.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	setupCalc(t, cl)
	out, code := runAgentCmd(t, calcTask, "--fake-model", fakellmTestdata(t, "fix.json"), "--addr", "unix://"+d.Sock, "--token", d.Token)
	if code != 0 {
		t.Fatalf("limbs agent exited %d:\n%s", code, out)
	}
	wantInOrder(t, out, want...)
}
