# limbs: build, test, fuzz, bench. `make help` lists the targets.
GO      ?= go
BIN     := bin
FUZZTIME ?= 10000x
# FuzzHookChanges runs real commands in a real bash for each input (about
# 12 inputs a second here): it gets a count of its own.
HOOKFUZZTIME ?= 300x
# bench-events: MiB of output logged while serve's RSS is read (1 GiB takes
# about 70 s on a 2-core machine), and commands of its latency cases.
EVENTS_MIB ?= 1024
EVENTS_ROUNDS ?= 300

# bench: flags for limbs bench, e.g. BENCHFLAGS='--only roundtrip --json new.json'.
BENCHFLAGS ?=

.PHONY: help build test test-short fuzz bench bench-go bench-events bench-checkpoints vet lint clean

help:
	@echo "make build       bin/limbs and a static bin/limbsd"
	@echo "make test        every test, with the race detector (Docker tests skip without an engine)"
	@echo "make fuzz        each fuzz target for FUZZTIME ($(FUZZTIME): a count of inputs, so that no deadline can cut an input short), corpus in testdata/fuzz"
	@echo "make bench       limbs bench: every figure next to its baseline in one table, with the targets (BENCHFLAGS: its flags; docs/bench.md)"
	@echo "make bench-go    the Go benchmarks against their baselines: round trip and throughput vs a raw PTY, sandboxes vs docker run/exec, bench-events"
	@echo "make bench-checkpoints first checkpoint, 1-file change, restore, fork of 10 vs tar and docker commit"
	@echo "make bench-events the event log in one table: ingest/s, follow latency, exec with and without the log, serve's RSS over EVENTS_MIB ($(EVENTS_MIB)) MiB of output"
	@echo "make vet         gofmt, go vet and staticcheck"

build:
	CGO_ENABLED=0 $(GO) build -o $(BIN)/limbsd ./cmd/limbsd
	$(GO) build -o $(BIN)/limbs ./cmd/limbs

test: build
	$(GO) test -race -count=1 -timeout 30m ./...
	@# Its check of the runtime's idle wake-ups cannot run under -race.
	$(GO) test -count=1 ./internal/sysmon/

test-short:
	$(GO) test -race -short -count=1 ./...

# Every Fuzz function of every package, one at a time (go test -fuzz takes one).
fuzz:
	@set -e; for f in $$(grep -l '^func Fuzz' $$(git ls-files '*_test.go')); do \
		pkg=./$$(dirname $$f); \
		for t in $$(grep -o '^func Fuzz[A-Za-z0-9_]*' $$f | cut -d' ' -f2); do \
			n=$(FUZZTIME); [ "$$t" = FuzzHookChanges ] && n=$(HOOKFUZZTIME); \
			echo "fuzz $$pkg $$t ($$n)"; \
			$(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $$n $$pkg; \
		done; \
	done

bench: build
	$(BIN)/limbs bench $(BENCHFLAGS)

bench-go: build
	$(GO) test -run '^$$' -bench RoundTrip -benchtime 2000x ./internal/bench
	$(GO) test -run '^$$' -bench Throughput -benchtime 10x ./internal/bench
	$(GO) test -run '^$$' -bench DockerSandboxes -benchtime 20x ./internal/control
	$(MAKE) --no-print-directory bench-events

# Acceptance 5 of the events issue: one table (internal/control/events_bench_test.go).
bench-events: build
	LIMBS_BENCH_EVENTS_MIB=$(EVENTS_MIB) LIMBS_BENCH_EVENTS_ROUNDS=$(EVENTS_ROUNDS) \
		$(GO) test -run '^$$' -bench '^BenchmarkEvents$$' -benchtime 1x -timeout 30m ./internal/control

# Acceptance 5 of the checkpoints issue: one table (internal/control/checkpoint_bench_test.go).
bench-checkpoints: build
	$(GO) test -run '^$$' -bench '^BenchmarkCheckpoints$$' -benchtime 1x -timeout 30m ./internal/control

vet:
	@test -z "$$(gofmt -l . | tee /dev/stderr)"
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

clean:
	rm -rf $(BIN)
