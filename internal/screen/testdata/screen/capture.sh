#!/bin/sh
# Records the real-program inputs of the screen golden tests on an 80x24
# pseudo-terminal (util-linux script). Full-screen programs are killed while
# they show their screen, so the stream ends on what they drew. Run it from
# this directory, then `go test ./internal/screen -run ScreenGolden -update`
# and review the .golden diffs.
set -eu
printf 'first line of the file\nsecond line: 日本語 wide\n\tindented\n' >/tmp/limbs-screen-file.txt
capture() {
	name=$1
	shift
	TERM=xterm-256color script -q -E never -c "stty cols 80 rows 24; $*" "$name.raw" >/dev/null </dev/null
	# script adds a newline of its own before its footer line.
	sed '1d;$d' "$name.raw" | perl -0pe 's/\n\z//' >"$name.in"
	rm -f "$name.raw"
}
capture vim_start 'timeout -s KILL 1 vim -u NONE -N -n -i NONE /tmp/limbs-screen-file.txt'
capture vim_quit 'vim -u NONE -N -n -i NONE -c "sleep 300m" -c "qa!" /tmp/limbs-screen-file.txt; echo after vim'
capture less_file 'timeout -s KILL 1 less /tmp/limbs-screen-file.txt'
capture top_interactive 'top -n 1 -w 80'
capture top_batch 'top -b -n 1 -w 80 | head -15'
rm -f /tmp/limbs-screen-file.txt
