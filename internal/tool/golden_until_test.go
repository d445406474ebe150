package tool_test

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/limbs-dev/limbs/internal/tool"
	"github.com/limbs-dev/limbs/internal/wire"
)

// The golden cases of until: a wait that ends because a condition held
// while the command runs on.
func init() {
	goldenCases = append(goldenCases, []struct {
		name  string
		doc   string
		steps []step
		opts  tool.ShellOptions
	}{
		{"until_output", "shell_wait until a log line shows; the command keeps running.", []step{
			run(tool.RunInput{Command: `echo compiling; sleep 1.5; echo "build $((3+4)) ready"; sleep 100`, Yield: f(0.5)}),
			wait(tool.WaitInput{Yield: f(30), Until: &wire.Until{Output: ptr(`build \d+ ready`)}}),
		}, tool.ShellOptions{}},
		{"until_port", "shell_run until a server listens on its port (a free port of the host, shown as PORT).", []step{
			runOnFreePort(func(port string) tool.RunInput {
				p, _ := strconv.Atoi(port)
				return tool.RunInput{Command: "echo starting; python3 -m http.server " + port + " --bind 127.0.0.1 >/dev/null 2>&1", Yield: f(30), Until: &wire.Until{Port: &p}}
			}),
		}, tool.ShellOptions{}},
		{"until_quiet", "shell_run until the output has been quiet for a second.", []step{
			run(tool.RunInput{Command: `echo one; echo two; sleep 100`, Yield: f(30), Until: &wire.Until{Quiet: f(1)}}),
		}, tool.ShellOptions{}},
	}...)
}

func ptr[T any](v T) *T { return &v }

func wait(in tool.WaitInput) step {
	return func(ctx context.Context, t *testing.T, sh *tool.Shell) (string, any, bool) {
		r, err := sh.Wait(ctx, in)
		if err != nil {
			t.Fatalf("shell_wait %+v: %v", in, err)
		}
		return r.Text, r.Out.Results[0], r.IsError
	}
}

var (
	portsMu sync.Mutex
	ports   []string // the free ports the golden cases used, written PORT
)

func goldenPorts() []string {
	portsMu.Lock()
	defer portsMu.Unlock()
	return append([]string(nil), ports...)
}

// runOnFreePort is a shell_run on a port free on the host (limbsd of the
// golden tests runs there): the golden text shows it as PORT.
func runOnFreePort(in func(port string) tool.RunInput) step {
	return func(ctx context.Context, t *testing.T, sh *tool.Shell) (string, any, bool) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
		l.Close()
		portsMu.Lock()
		ports = append(ports, port)
		portsMu.Unlock()
		return run(in(port))(ctx, t, sh)
	}
}
