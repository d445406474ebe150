#!/usr/bin/env bash
# docker-up.sh: make sure a Docker engine answers on this machine.
#
# Idempotent. Installs docker.io (plus bubblewrap and debootstrap, which the
# local provider and scripts/build-base-image.sh need) when missing, then
# starts dockerd in the background if `docker info` fails, and waits until it
# answers. It never stops or restarts a dockerd it did not start: an engine
# that already answers is left alone.
#
# Environment:
#   LIMBS_DOCKERD_LOG      dockerd log (default /var/log/limbs-dockerd.log)
#   LIMBS_DOCKERD_PIDFILE  pidfile of the dockerd we start (default /run/limbs-dockerd.pid)
#   LIMBS_DOCKERD_WAIT     seconds to wait for the engine (default 60)
set -euo pipefail

log_file=${LIMBS_DOCKERD_LOG:-/var/log/limbs-dockerd.log}
pid_file=${LIMBS_DOCKERD_PIDFILE:-/run/limbs-dockerd.pid}
wait_s=${LIMBS_DOCKERD_WAIT:-60}

say() { printf 'docker-up: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null || die "not root and no sudo: run this script as root"
	sudo_cmd=(sudo)
fi

# The docker CLI on PATH may be newer than the engine Debian ships (a v28
# client against a 20.10 engine, API 1.41): CLIs negotiate the API version
# down, so this works; an older CLI that does not can be run with
# DOCKER_API_VERSION=1.41.
docker_ok() { docker info >/dev/null 2>&1; }

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v docker >/dev/null || missing+=(docker.io)
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
	# Others may be installing at the same time: wait for the dpkg lock.
	# shellcheck disable=SC2207
	pkgs=($(printf '%s\n' "${missing[@]}" | sort -u))
	say "installing ${pkgs[*]} (apt-get)"
	"${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq
	DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi

if docker_ok; then
	say "engine already answers: $(docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})' 2>/dev/null || echo up)"
	exit 0
fi

# A dockerd we started earlier may still be starting: wait for it instead of
# starting a second one.
started_by_us=0
if [ -s "$pid_file" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null; then
	say "dockerd (pid $(cat "$pid_file")) started earlier by this script is not answering yet; waiting"
elif pgrep -x dockerd >/dev/null 2>&1; then
	die "a dockerd not started by this script is running (pid $(pgrep -x dockerd | tr '\n' ' ')) but 'docker info' fails; check it yourself, this script never touches an engine it did not start"
else
	say "starting dockerd (log $log_file, pidfile $pid_file)"
	"${sudo_cmd[@]}" mkdir -p "$(dirname "$log_file")" "$(dirname "$pid_file")"
	# setsid + nohup: the engine must outlive this shell and the CI step.
	"${sudo_cmd[@]}" sh -c "setsid nohup dockerd >>'$log_file' 2>&1 </dev/null & echo \$! >'$pid_file'"
	started_by_us=1
fi

for _ in $(seq 1 "$wait_s"); do
	if docker_ok; then
		say "engine up: $(docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})' 2>/dev/null || echo ok)"
		exit 0
	fi
	if [ "$started_by_us" = 1 ] && ! kill -0 "$(cat "$pid_file")" 2>/dev/null; then
		say "dockerd exited; last lines of $log_file:"
		tail -n 30 "$log_file" >&2 || true
		die "dockerd did not start; fix the cause above and rerun scripts/docker-up.sh"
	fi
	sleep 1
done
say "last lines of $log_file:"
tail -n 30 "$log_file" >&2 || true
die "no answer from the Docker engine after ${wait_s}s; see $log_file, then rerun scripts/docker-up.sh"
