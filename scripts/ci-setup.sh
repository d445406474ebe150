#!/usr/bin/env bash
# ci-setup.sh: everything CI needs before `make test` runs the Docker tests
# for real: a Docker engine (plus bubblewrap and debootstrap), the
# limbs/base image, and a static bin/limbsd.
#
# Idempotent and cheap when nothing changed: docker-up.sh leaves a running
# engine alone, and build-base-image.sh skips when the image carries the
# label of the current script, or re-imports the root tarball cached under
# /var/cache/limbs (keep that directory between runs to skip debootstrap).
#
# .ci/run calls this script when it exists.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
start=$SECONDS
say() { printf 'ci-setup: [%3ds] %s\n' "$((SECONDS - start))" "$*" >&2; }

say "docker engine"
scripts/docker-up.sh

say "base image"
scripts/build-base-image.sh

say "bin/limbsd (static)"
mkdir -p bin
CGO_ENABLED=0 go build -o bin/limbsd ./cmd/limbsd

# asciinema (cmd/limbs's TestExportAsciinema runs `asciinema cat` on an
# export): Debian's package.
say "asciinema (apt-get)"
if ! command -v asciinema >/dev/null; then
	{ apt-get -o DPkg::Lock::Timeout=600 update -qq &&
		DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends asciinema >/dev/null; } ||
		say "warning: installing asciinema failed; TestExportAsciinema will fail under LIMBS_REQUIRE_ASCIINEMA=1"
fi

# tmux (limbs bench times a tmux session driven with send-keys and polled
# with capture-pane, the baseline of OpenHands' runtime): Debian's package.
say "tmux (apt-get)"
if ! command -v tmux >/dev/null; then
	{ apt-get -o DPkg::Lock::Timeout=600 update -qq &&
		DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends tmux >/dev/null; } ||
		say "warning: installing tmux failed; limbs bench will note its tmux rows as not measured"
fi

# Chromium (internal/dashboard's browser tests drive it headless with
# chromedp): Debian's package.
say "chromium (apt-get)"
if ! command -v chromium >/dev/null; then
	{ apt-get -o DPkg::Lock::Timeout=600 update -qq &&
		DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends chromium >/dev/null; } ||
		say "warning: installing chromium failed; the dashboard's browser tests will fail under LIMBS_REQUIRE_BROWSER=1"
fi

# The MCP Inspector CLI (internal/mcp's TestInspectorCLI runs it; keep the
# version in step with its inspectorPkg): fetched once into npm's cache,
# bounded in time.
say "MCP Inspector CLI (npm)"
if command -v npx >/dev/null; then
	timeout 300 npx -y @modelcontextprotocol/inspector@0.15.0 --cli --help >/dev/null ||
		say "warning: fetching the MCP Inspector failed; TestInspectorCLI will fail under LIMBS_REQUIRE_INSPECTOR=1"
else
	say "warning: no npx (Node.js): TestInspectorCLI will fail under LIMBS_REQUIRE_INSPECTOR=1"
fi

# The MCP clients whose configuration docs/mcp.md gives (cmd/limbs's
# TestClientConfigs runs them; keep the versions in step with its
# claudePkg and codexPkg), fetched the same way. Neither is logged in.
say "Claude Code and Codex CLIs (npm)"
if command -v npx >/dev/null; then
	for pkg in @anthropic-ai/claude-code@2.1.332 @openai/codex@0.171.0; do
		timeout 300 npx -y "$pkg" --version >/dev/null ||
			say "warning: fetching $pkg failed; TestClientConfigs will fail under LIMBS_REQUIRE_MCP_CLIENTS=1"
	done
else
	say "warning: no npx (Node.js): TestClientConfigs will fail under LIMBS_REQUIRE_MCP_CLIENTS=1"
fi

say "ready: $(docker version --format 'engine {{.Server.Version}} (API {{.Server.APIVersion}})'), $(docker image inspect --format '{{index .RepoTags 0}}' limbs/base:latest), bin/limbsd"
