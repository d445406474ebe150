#!/bin/sh
# Refetches the dashboard's vendored front-end libraries at pinned versions
# from the npm registry (npm pack: no install, no build) into
# internal/dashboard/assets/vendor/, each with its licence. Run it from
# the repository's root after changing a version below; commit the result.
# Installing or building limbs never needs npm.
set -eu

XTERM=6.0.0
FIT=0.11.0

root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/internal/dashboard/assets/vendor"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fetch() { # package version dir files...
	pkg=$1 ver=$2 dir=$3
	shift 3
	(cd "$tmp" && npm pack --silent "$pkg@$ver" >/dev/null)
	tgz=$(ls "$tmp"/*.tgz)
	mkdir -p "$tmp/x" "$dest/$dir"
	tar -xzf "$tgz" -C "$tmp/x"
	for f in "$@"; do
		# Without the source map line: the maps are not vendored.
		sed '/^\/\/# sourceMappingURL=/d' "$tmp/x/package/$f" >"$dest/$dir/$(basename "$f")"
	done
	echo "$pkg@$ver" >"$dest/$dir/VERSION"
	rm -rf "$tmp/x" "$tgz"
}

rm -rf "$dest"
fetch @xterm/xterm "$XTERM" xterm LICENSE lib/xterm.mjs css/xterm.css
fetch @xterm/addon-fit "$FIT" addon-fit LICENSE lib/addon-fit.mjs
echo "vendored into $dest:"
ls -R "$dest"
