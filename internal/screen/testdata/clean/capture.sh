#!/bin/sh
# Records the real-program inputs of the golden tests: each command runs on a
# pseudo-terminal (util-linux script) and its raw output stream, without
# script's own header and footer lines, becomes NAME.in. Run it from this
# directory, then `go test ./internal/screen -run Golden -update` and review
# the .golden diffs. The .in files are checked in, so the tests never run
# these programs.
set -eu
capture() {
	name=$1
	shift
	script -q -E never -c "stty cols 80 rows 24; $*" "$name.raw" >/dev/null </dev/null
	# script adds a newline of its own before its footer line.
	sed '1d;$d' "$name.raw" | perl -0pe 's/\n\z//' >"$name.in"
	rm -f "$name.raw"
}
capture ls_color 'ls --color=always -F /usr/share/doc/bash /usr/share/doc/git | head -20'
capture grep_color 'printf "alpha beta\nbeta gamma\n" | grep --color=always beta'
capture dd_progress 'for i in 1 2 3; do head -c 1000000 /dev/zero; sleep 1.2; done | dd of=/dev/null bs=1000000 iflag=fullblock status=progress'
capture curl_meter 'curl -o /dev/null file:///usr/bin/bash'
capture curl_bar 'curl -# -o /dev/null file:///usr/bin/bash'
capture pip_rich 'python3 -c "
from pip._vendor.rich.progress import Progress, BarColumn, DownloadColumn
with Progress(BarColumn(), DownloadColumn(), refresh_per_second=1000) as p:
    t = p.add_task(\"download\", total=2000000)
    for i in range(20):
        p.update(t, advance=100000)
        p.refresh()
"; echo Successfully installed demo-1.0'
capture python_traceback 'python3 -c "import json; json.loads(\"{\")"'
capture rich_multi 'python3 -c "
from pip._vendor.rich.progress import Progress
with Progress(refresh_per_second=1000) as p:
    tasks = [p.add_task(n, total=10) for n in (\"layer a\", \"layer b\", \"layer c\")]
    for i in range(10):
        for t in tasks:
            p.update(t, advance=1)
            p.refresh()
"; echo pulled'
