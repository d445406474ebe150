#!/usr/bin/env bash
# build-base-image.sh: build the default sandbox image limbs/base:latest from
# Debian packages, without any container registry.
#
# debootstrap makes a minimal Debian bookworm root from the apt mirror this
# machine is already configured with (read from /etc/apt/sources.list*), apt
# installs the tools agents expect inside it, and `docker import` turns the
# root into an image (no locale package: C.UTF-8 is built into glibc).
# images/base/Dockerfile builds the same image for users who can pull
# debian:bookworm.
#
# Cached twice:
#   - the image carries the label limbs.base.key, a hash of this whole
#     script; a matching image skips everything;
#   - the root tarball is kept under $LIMBS_CACHE_DIR (default
#     /var/cache/limbs), keyed by a hash of the recipe part of this script
#     (package list and build steps, between the "recipe" markers), so a
#     machine that lost the image, or a change to the image metadata only,
#     re-imports in seconds.
#
# Environment:
#   LIMBS_BASE_IMAGE  image to build (default limbs/base:latest)
#   LIMBS_CACHE_DIR   cache directory (default /var/cache/limbs)
#   LIMBS_MIRROR      Debian mirror URL (default: from /etc/apt/sources.list*)
#   LIMBS_FORCE=1     rebuild even when the image or tarball matches
set -euo pipefail

image=${LIMBS_BASE_IMAGE:-limbs/base:latest}
cache_dir=${LIMBS_CACHE_DIR:-/var/cache/limbs}

#>>> recipe: everything that decides the root tarball's content
suite=bookworm

# Everything an agent commonly reaches for. Changing this list changes the
# recipe key, so the root is rebuilt.
packages=(
	bash coreutils findutils grep sed gawk diffutils patch less file
	git python3 python3-pip python3-venv nodejs npm
	tmux vim-nox curl wget ca-certificates procps psmisc
	build-essential pkg-config make openssh-client unzip xz-utils zip
	jq tree iproute2 tzdata
)
#<<< recipe

start=$SECONDS
step() { printf 'build-base-image: [%3ds] %s\n' "$((SECONDS - start))" "$*" >&2; }
die() { printf 'build-base-image: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "debootstrap needs root: run as root (CI does)"
command -v docker >/dev/null || die "no docker CLI: run scripts/docker-up.sh first"
docker info >/dev/null 2>&1 || die "no Docker engine answers: run scripts/docker-up.sh first"

self=$(readlink -f "${BASH_SOURCE[0]}")
key=$(sha256sum "$self" | cut -c1-16)
recipe_key=$(sed -n '/^#>>> recipe/,/^#<<< recipe/p' "$self" | sha256sum | cut -c1-16)
tarball=$cache_dir/base-$suite-$recipe_key.tar

step "image key $key, recipe key $recipe_key"
have=$(docker image inspect --format '{{ index .Config.Labels "limbs.base.key" }}' "$image" 2>/dev/null || true)
if [ "$have" = "$key" ] && [ "${LIMBS_FORCE:-0}" != 1 ]; then
	step "$image already built from this script (label limbs.base.key=$key): nothing to do"
	exit 0
fi

# One build at a time per cache: a second run (CI next to a developer)
# waits, then finds the image or the tarball the first one made.
mkdir -p "$cache_dir"
exec 9>"$cache_dir/.build.lock"
if ! flock -n 9; then
	step "another build-base-image.sh is running; waiting for it"
	flock 9
	have=$(docker image inspect --format '{{ index .Config.Labels "limbs.base.key" }}' "$image" 2>/dev/null || true)
	if [ "$have" = "$key" ] && [ "${LIMBS_FORCE:-0}" != 1 ]; then
		step "$image was built meanwhile: nothing to do"
		exit 0
	fi
fi

import_tarball() {
	step "importing $tarball as $image"
	docker import \
		--change "LABEL limbs.base.key=$key" \
		--change "LABEL limbs.base.recipe=$recipe_key" \
		--change 'LABEL org.opencontainers.image.title="limbs/base"' \
		--change "LABEL org.opencontainers.image.description=\"Debian $suite with the tools agents use; user agent (uid 1000)\"" \
		--change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
		--change "ENV LANG=C.UTF-8" \
		--change "USER 1000:1000" \
		--change "WORKDIR /workspace" \
		--change 'CMD ["/bin/bash"]' \
		"$tarball" "$image" >/dev/null
	# Images this one replaced are left untagged: remove those this script
	# made (they carry limbs.base.key) that no container uses any more.
	local id
	for id in $(docker image ls -q --no-trunc --filter dangling=true --filter label=limbs.base.key); do
		docker image rm "$id" >/dev/null 2>&1 && step "removed the replaced image ${id#sha256:}" || true
	done
	step "done: $image ($(docker image inspect --format '{{.Size}}' "$image" | awk '{printf "%.0f MiB", $1/1048576}'))"
}

if [ -s "$tarball" ] && [ "${LIMBS_FORCE:-0}" != 1 ]; then
	step "cached root tarball found"
	import_tarball
	exit 0
fi

command -v debootstrap >/dev/null || die "no debootstrap: run scripts/docker-up.sh (it installs it) or apt-get install debootstrap"

#>>> recipe (the build steps)
# The mirror serving "$suite main" in this machine's apt configuration, in
# either the deb822 (*.sources) or the one-line (*.list) format.
find_mirror() {
	local want=$1 f
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk -v want="$want" '
			function flush() { if (uris != "" && (" " suites " ") ~ (" " want " ") && (" " comps " ") ~ / main /) { split(uris, u, " "); print u[1]; found = 1; exit } uris = ""; suites = ""; comps = "" }
			/^[ \t]*$/ { flush(); next }
			/^URIs:/ { sub(/^URIs:[ \t]*/, ""); uris = $0 }
			/^Suites:/ { sub(/^Suites:[ \t]*/, ""); suites = $0 }
			/^Components:/ { sub(/^Components:[ \t]*/, ""); comps = $0 }
			END { if (!found) flush() }
		' "$f"
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		sed -E 's/\[[^]]*\]//' "$f" | awk -v want="$want" '$1 == "deb" && $3 == want { for (i = 4; i <= NF; i++) if ($i == "main") { print $2; exit } }'
	done
}

mirror=${LIMBS_MIRROR:-$(find_mirror "$suite" | head -n1)}
[ -n "$mirror" ] || die "no apt source for '$suite main' in /etc/apt/sources.list*: set LIMBS_MIRROR=http://your-debian-mirror/debian"
security=$(find_mirror "$suite-security" | head -n1)
step "mirror $mirror${security:+, security $security}"

mkdir -p "$cache_dir"
work=$(mktemp -d "$cache_dir/build.XXXXXX")
root=$work/root
cleanup() {
	local m
	# Unmount anything still mounted under the root before deleting it.
	for m in $(awk -v r="$root" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r); do
		umount -l "$m" 2>/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT

step "debootstrap --variant=minbase $suite (a few minutes cold)"
debootstrap --variant=minbase --merged-usr "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
	{ tail -n 30 "$work/debootstrap.log" >&2; die "debootstrap failed (log above)"; }

{
	echo "deb $mirror $suite main"
	echo "deb $mirror $suite-updates main"
	[ -z "$security" ] || echo "deb $security $suite-security main"
} >"$root/etc/apt/sources.list"
# No daemon may start inside the build root.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod +x "$root/usr/sbin/policy-rc.d"
# No fsync per unpacked file while building: the root is packed into a
# tarball at the end anyway, and fsyncs are most of dpkg's time here.
echo force-unsafe-io >"$root/etc/dpkg/dpkg.cfg.d/00-limbs-build-unsafe-io"
# Keep the image small: no docs, man pages or translations.
cat >"$root/etc/dpkg/dpkg.cfg.d/01-limbs-nodoc" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
CFG
cat >"$root/etc/apt/apt.conf.d/01-limbs" <<'CFG'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
CFG
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"

step "apt-get install ${#packages[@]} packages (and their dependencies)"
chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
	sh -c "apt-get update -qq && apt-get install -y -qq ${packages[*]}" >"$work/apt.log" 2>&1 ||
	{ tail -n 30 "$work/apt.log" >&2; die "apt-get install in the build root failed (log above)"; }

step "user agent (uid/gid 1000), /workspace"
chroot "$root" /bin/sh -ec '
	groupadd --gid 1000 agent
	useradd --uid 1000 --gid 1000 --create-home --home-dir /home/agent --shell /bin/bash agent
	mkdir -p /workspace /var/lib/limbs /run/limbs /opt/limbs
	chown agent:agent /workspace /var/lib/limbs /run/limbs
	ln -sf /usr/share/zoneinfo/Etc/UTC /etc/localtime
	echo "Etc/UTC" >/etc/timezone
	printf "limbs\n" >/etc/hostname
'
printf 'export LANG=C.UTF-8\n' >"$root/etc/profile.d/limbs.sh"

step "cleaning"
for m in $(awk -v r="$root" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r); do umount "$m"; done
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/log/*.log \
	"$root"/var/log/apt/* "$root"/tmp/* "$root"/root/.cache "$root/usr/sbin/policy-rc.d" \
	"$root/etc/dpkg/dpkg.cfg.d/00-limbs-build-unsafe-io"
# The engine provides these at run time.
: >"$root/etc/resolv.conf"
: >"$root/etc/hostname"

step "packing root into $tarball"
rm -f "$cache_dir"/base-$suite-*.tar
tar --numeric-owner --xattrs -C "$root" -cf "$tarball.tmp" .
mv "$tarball.tmp" "$tarball"
#<<< recipe

import_tarball
