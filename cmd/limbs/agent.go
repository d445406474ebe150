package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/limbs-dev/limbs/internal/agent"
	"github.com/limbs-dev/limbs/internal/agent/fakellm"
	"github.com/limbs-dev/limbs/internal/tool"
	"github.com/limbs-dev/limbs/internal/wire"
)

func init() {
	commands["agent"] = command{summary: "hand a sandbox a task: a model (any OpenAI-compatible server) works on it with the limbs tools", run: runAgent}
}

const agentUsage = `usage: limbs agent "TASK" --model MODEL [flags]

Runs an agent on TASK: the model (any server speaking the OpenAI chat
completions protocol with tool calls: OpenAI, vLLM, Ollama, llama.cpp,
LiteLLM, a gateway) gets the limbs tools of --profile plus finish, and
works in a sandbox until it calls finish, a limit is reached, it is
stuck, or Ctrl-C (which interrupts the running command). Its text, each
tool call and each result are printed as they happen. Where it works:

  --addr unix:///path/limbsd.sock   one limbsd
  --sandbox ID                      a sandbox of limbs serve
  --image IMG                       a new sandbox of limbs serve from IMG,
                                    removed at the end unless --keep

The API key comes from LIMBS_LLM_API_KEY, else OPENAI_API_KEY (never a
flag, never printed); a local server needs none. Exit code: 0 when the
model called finish, 1 for every other stop (the last line says why),
2 for a usage error, 130 on Ctrl-C.

  limbs agent "make the tests pass" --model gpt-4.1 --image limbs/base
  limbs agent "..." --model qwen2.5-coder:14b --base-url http://127.0.0.1:11434/v1 --addr unix:///tmp/limbs/limbsd.sock
  limbs agent "..." --fake-model internal/agent/fakellm/testdata/fix.json --addr unix:///tmp/limbs/limbsd.sock
`

// agentFlags are the flags of limbs agent.
type agentFlags struct {
	cn            *conn
	ckptEach      bool // --checkpoint-each-step (checkpoint.go)
	image         string
	model         string
	baseURL       string
	profile       string
	approve       string
	keep          bool
	fake          string
	system        string
	limits        agent.Limits
	prices        agent.Prices
	contextTokens int
	logLevel      string
	record        string      // agentrecord.go
	batch         *batchFlags // batch.go
}

func parseAgentFlags(args []string) (*agentFlags, string, int, bool) {
	fs := flag.NewFlagSet("limbs agent", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), agentUsage+"\nflags:\n")
		fs.PrintDefaults()
	}
	f := &agentFlags{cn: &conn{}}
	fs.StringVar(&f.cn.addr, "addr", os.Getenv("LIMBS_ADDR"), "API address: unix:///path/limbsd.sock (one limbsd), or limbs serve's HOST:PORT with --sandbox/--image (env LIMBS_ADDR)")
	fs.StringVar(&f.cn.token, "token", "", "bearer token of limbsd or limbs serve (env LIMBS_TOKEN; default: the token file next to the socket, or limbs serve's)")
	fs.StringVar(&f.cn.sandbox, "sandbox", os.Getenv("LIMBS_SANDBOX"), "sandbox id or name of limbs serve (env LIMBS_SANDBOX)")
	fs.StringVar(&f.image, "image", "", "create a sandbox of limbs serve from this image (removed at the end unless --keep)")
	fs.StringVar(&f.model, "model", os.Getenv("LIMBS_MODEL"), "the model's name on the server (env LIMBS_MODEL)")
	fs.StringVar(&f.baseURL, "base-url", os.Getenv("LIMBS_LLM_BASE_URL"), "the server's OpenAI-compatible base URL, e.g. http://127.0.0.1:11434/v1 (env LIMBS_LLM_BASE_URL; default OpenAI's)")
	fs.StringVar(&f.profile, "profile", "", "tool profile: "+strings.Join(tool.ProfileNames(), ", ")+" (the shapes models were trained on)")
	fs.StringVar(&f.approve, "approve", "auto", "auto: run every call; ask: confirm each call that is not read-only on the terminal")
	fs.BoolVar(&f.keep, "keep", false, "keep the sandbox made with --image, and the agent's session, when the run ends")
	fs.StringVar(&f.fake, "fake-model", "", "serve the model from this fakellm script (JSON) on 127.0.0.1 instead of a real server: for demonstrations and tests")
	fs.StringVar(&f.system, "system", "", "file holding the system prompt (default: limbs' own)")
	fs.IntVar(&f.limits.Steps, "max-steps", agent.DefaultLimits.Steps, "stop after this many model turns")
	fs.Int64Var(&f.limits.Tokens, "max-tokens", agent.DefaultLimits.Tokens, "stop once the run used this many tokens (prompt plus completion)")
	fs.DurationVar(&f.limits.Time, "max-time", agent.DefaultLimits.Time, "stop after this wall time (the running command is interrupted)")
	fs.Float64Var(&f.limits.Cost, "max-cost", 0, "stop once the run cost this much (needs --price-input/--price-output; 0: no limit)")
	fs.Float64Var(&f.prices.Input, "price-input", 0, "price of a million prompt tokens, to count the cost")
	fs.Float64Var(&f.prices.Output, "price-output", 0, "price of a million completion tokens")
	fs.IntVar(&f.contextTokens, "context-tokens", 100_000, "the context window to keep the conversation in (old observations are shortened first)")
	fs.StringVar(&f.logLevel, "log-level", "warn", "debug, info, warn or error (logs go to stderr)")
	fs.StringVar(&f.record, "record", "", "also write the run's agent.* events to this file as JSON lines (with --addr, the only record of the run)")
	fs.BoolVar(&f.ckptEach, "checkpoint-each-step", false, "checkpoint the sandbox (limbs serve's) before each step's tool calls, as step-N: limbs rollback SANDBOX CP goes back to any")
	f.batch = addBatchFlags(fs)
	// The task may come before or after the flags.
	var task []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, "", 0, false
			}
			return nil, "", 2, false
		}
		if fs.NArg() == 0 {
			break
		}
		task = append(task, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if f.batch.tasks != "" {
		// A batch: the tasks come from the file.
		if u := f.batch.usage(f); u != "" || len(task) != 0 {
			if u == "" {
				u = "give the tasks in the --tasks file or one TASK, not both"
			}
			fmt.Fprintln(os.Stderr, "limbs agent: "+u)
			return nil, "", 2, false
		}
		task = []string{"(batch)"}
	}
	switch {
	case len(task) != 1 || strings.TrimSpace(task[0]) == "":
		fmt.Fprintln(os.Stderr, `limbs agent: give the task as one argument, in quotes: limbs agent "make the tests pass" --model M`)
		return nil, "", 2, false
	case f.model == "" && f.fake == "":
		fmt.Fprintln(os.Stderr, "limbs agent: --model is needed (the model's name on the server, e.g. gpt-4.1 or qwen2.5-coder:14b)")
		return nil, "", 2, false
	case f.image != "" && f.cn.sandbox != "":
		fmt.Fprintln(os.Stderr, "limbs agent: give --image (a new sandbox) or --sandbox (an existing one), not both")
		return nil, "", 2, false
	case f.approve != "auto" && f.approve != "ask":
		fmt.Fprintf(os.Stderr, "limbs agent: --approve %q: use auto or ask\n", f.approve)
		return nil, "", 2, false
	case f.limits.Cost > 0 && f.prices == (agent.Prices{}):
		fmt.Fprintln(os.Stderr, "limbs agent: --max-cost needs the prices: --price-input and --price-output (per million tokens)")
		return nil, "", 2, false
	}
	return f, task[0], 0, true
}

// agentAPIKey is the model server's key from the environment.
func agentAPIKey() string {
	if k := os.Getenv("LIMBS_LLM_API_KEY"); k != "" {
		return k
	}
	return os.Getenv("OPENAI_API_KEY")
}

func runAgent(ctx context.Context, args []string) int {
	f, task, code, ok := parseAgentFlags(args)
	if !ok {
		return code
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "limbs agent: --log-level %q: use debug, info, warn or error\n", f.logLevel)
		return 2
	}
	key := agentAPIKey()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	system := ""
	if f.system != "" {
		b, err := os.ReadFile(f.system)
		if err != nil {
			fmt.Fprintf(os.Stderr, "limbs agent: --system: %v\n", err)
			return 2
		}
		system = string(b)
	}
	if f.fake != "" {
		script, err := fakellm.Load(f.fake)
		if err != nil {
			fmt.Fprintf(os.Stderr, "limbs agent: --fake-model: %v\n", err)
			return 2
		}
		srv, err := fakellm.Start(script)
		if err != nil {
			fmt.Fprintf(os.Stderr, "limbs agent: --fake-model: %v\n", err)
			return 1
		}
		defer srv.Close()
		f.baseURL = srv.URL
		if f.model == "" {
			f.model = "fakellm"
		}
	}
	if f.baseURL == "" && key == "" {
		fmt.Fprintln(os.Stderr, "limbs agent: no API key for OpenAI: set OPENAI_API_KEY (or LIMBS_LLM_API_KEY), or give --base-url of another server")
		return 2
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if f.batch.tasks != "" {
		return runBatch(ctx, f, key, system, log) // batch.go
	}

	if f.image != "" {
		id, remove, err := newSandbox(ctx, f.cn, f.image, "limbs agent")
		if err != nil {
			fmt.Fprintf(os.Stderr, "limbs agent: %s\n", safeErr(err))
			return 1
		}
		if f.keep {
			fmt.Fprintf(os.Stderr, "limbs agent: working in sandbox %s (kept at the end: --keep)\n", safe(id))
		} else {
			defer remove()
		}
		f.cn.sandbox = id
	}
	cl, err := f.cn.client()
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs agent: %s\n", safeErr(err))
		return 1
	}
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = cl.Health(hctx)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs agent: cannot reach the sandbox: %s\n", safeErr(err))
		return 1
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	session := "agent-" + hex.EncodeToString(b)
	sh := agent.NewShell(cl, tool.ShellOptions{Session: wire.CreateSession{Name: session}})
	specs, err := tool.Profile(f.profile, sh, cl.FileStore())
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs agent: --profile: %v\n", err)
		return 2
	}
	if !f.keep {
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := cl.DeleteSession(dctx, session); err != nil && !errors.Is(err, wire.ErrNotFound) {
				log.Warn("closing the agent's session", "session", session, "err", err)
			}
		}()
	}
	out := io.Writer(os.Stdout)
	cfg := agent.Config{
		Model: f.model, BaseURL: f.baseURL, APIKey: key,
		Tools: specs, Shell: sh, System: system,
		Limits: f.limits, Prices: f.prices, ContextTokens: f.contextTokens,
		Observer: &agent.Printer{W: out}, Logger: log,
	}
	rec, closeRec, err := agentRecorder(f, cl, session, task, system, key, log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs agent: %v\n", err)
		return 2
	}
	if rec != nil {
		cfg.Observer = agent.Observers{cfg.Observer, rec}
	}
	if cfg.Tools, cfg.Observer, err = agentCheckpoints(ctx, f.cn, f.ckptEach, cfg.Tools, cfg.Observer); err != nil {
		fmt.Fprintf(os.Stderr, "limbs agent: %v\n", err)
		return 2
	}
	defer closeRec()
	if f.approve == "ask" {
		cfg.Approve = &agent.Ask{In: os.Stdin, Out: os.Stderr}
	}
	fmt.Fprintf(out, "> %s\n", safe(task))
	res, err := agent.Run(ctx, cfg, task)
	if err != nil {
		fmt.Fprintf(os.Stderr, "limbs agent: %v\n", err)
		return 2
	}
	switch res.Reason {
	case agent.Finished:
		return 0
	case agent.Cancelled:
		return exitInterrupted
	}
	return 1
}
