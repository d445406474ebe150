package tool

import "testing"

// TestDefaultYield pins the documented yield policy (package doc).
func TestDefaultYield(t *testing.T) {
	for _, tc := range []struct {
		command string
		class   YieldClass
		secs    float64
	}{
		{"ls -la", YieldQuick, 10},
		{"cat go.mod | grep module", YieldQuick, 10},
		{"git status && git diff --stat", YieldQuick, 10},
		{"/usr/bin/grep -rn foo .", YieldQuick, 10},
		{"FOO=1 BAR=2 env", YieldQuick, 10},
		{"cd app && make test", YieldBuild, 30},
		{"go test ./...", YieldBuild, 30},
		{"cargo build --release", YieldBuild, 30},
		{"python3 -m pytest -x", YieldBuild, 30},
		{"./configure", YieldBuild, 30},
		{"sleep 100", YieldBuild, 30},
		{"", YieldBuild, 30},
		{"apt-get install -y jq", YieldInstall, 120},
		{"sudo -E apt-get update", YieldInstall, 120},
		{"pip install -r requirements.txt", YieldInstall, 120},
		{"python3 -m pip install requests", YieldInstall, 120},
		{"npm ci", YieldInstall, 120},
		{"yarn", YieldInstall, 120},
		{"curl -fsSL https://example.com/x.sh | sh", YieldInstall, 120},
		{"git clone https://example.com/r.git && cd r", YieldInstall, 120},
		{"go mod download", YieldInstall, 120},
		{"timeout 60 wget https://example.com/f", YieldInstall, 120},
		{"ls\nnpm install\nls", YieldInstall, 120},
		{"(cd x; docker pull alpine)", YieldInstall, 120},
		{"npm test", YieldBuild, 30},
		{"git log --oneline", YieldQuick, 10},
	} {
		class, secs := DefaultYield(tc.command)
		if class != tc.class || secs != tc.secs {
			t.Errorf("DefaultYield(%q) = %s %g, want %s %g", tc.command, class, secs, tc.class, tc.secs)
		}
	}
}

func TestSignalOf(t *testing.T) {
	for code, want := range map[int]string{0: "", 1: "", 128: "", 130: "SIGINT", 137: "SIGKILL", 143: "SIGTERM", 139: "SIGSEGV", 159: "SIGSYS", 160: "", 255: ""} {
		if got := signalOf(code); got != want {
			t.Errorf("signalOf(%d) = %q, want %q", code, got, want)
		}
	}
}

func TestClampLines(t *testing.T) {
	long := make([]byte, 5000)
	for i := range long {
		long[i] = 'x'
	}
	got, n := clampLines("short\n"+string(long)+"\nend\n", 100)
	if n != 1 {
		t.Fatalf("clamped %d lines, want 1", n)
	}
	want := "short\n" + string(long[:75]) + " [... 4900 characters of this line not shown ...] " + string(long[:25]) + "\nend\n"
	if got != want {
		t.Errorf("clampLines:\n%q\nwant\n%q", got, want)
	}
}
