#!/usr/bin/env bash
# try.sh: a working sandbox on this machine, from a clean clone.
#
# Builds limbs, makes sure a Docker engine and the limbs/base image exist
# (falling back to the local provider when Docker cannot be had), starts
# `limbs serve` in the background if none answers on 127.0.0.1:7878, creates
# a sandbox and runs a command in it. It prints how to attach, clean up and
# stop the server. Idempotent: run it again for another sandbox.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
say() { printf 'try: %s\n' "$*" >&2; }

state=${LIMBS_STATE:-$PWD/.limbs}
addr=${LIMBS_ADDR:-127.0.0.1:7878}
mkdir -p "$state"

say "building bin/limbs and bin/limbsd"
make -s build

provider=local
if scripts/docker-up.sh && scripts/build-base-image.sh; then
	provider=docker
else
	say "no Docker engine: using the local provider (bubblewrap isolation when it works)"
fi

if ! curl -fsS "http://$addr/v1/health" >/dev/null 2>&1; then
	say "starting limbs serve on $addr (provider $provider, state $state, log $state/serve.log)"
	nohup bin/limbs serve --listen "$addr" --state-dir "$state" --provider "$provider" >"$state/serve.log" 2>&1 &
	echo $! >"$state/serve.pid"
	for _ in $(seq 1 100); do
		curl -fsS "http://$addr/v1/health" >/dev/null 2>&1 && break
		sleep 0.1
	done
	curl -fsS "http://$addr/v1/health" >/dev/null || { say "limbs serve did not start:"; tail -20 "$state/serve.log" >&2; exit 1; }
fi
export LIMBS_ADDR=$addr
if [ -z "${LIMBS_TOKEN:-}" ]; then
	LIMBS_TOKEN=$(cat "$state/token")
	export LIMBS_TOKEN
fi

id=$(bin/limbs sandbox create --name "try-$(date +%s)")
say "sandbox $id is running; a first command:"
bin/limbs exec --sandbox "$id" -- 'echo "hello from $(id -un) in $PWD"; uname -sr; python3 --version 2>&1 || true'
cat >&2 <<MSG

try: next steps (the environment below points the CLI at this server):
  export LIMBS_ADDR=$addr LIMBS_TOKEN=\$(cat $state/token)
  bin/limbs exec --sandbox $id -- 'ls -la'      # run a command
  bin/limbs shell --sandbox $id                 # attach a terminal (detach: Ctrl-])
  bin/limbs sandbox ls                          # list sandboxes
  bin/limbs sandbox rm $id                      # remove it
  kill \$(cat $state/serve.pid)                  # stop the server
MSG
