package shell

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// agentEnv is the environment every shell starts with on top of the
// daemon's own: nothing waits on a pager, a credential prompt or a dialog.
// A session's own env (and any later export) overrides each.
var agentEnv = []string{
	"PAGER=cat",
	"GIT_PAGER=cat",
	"MANPAGER=cat",
	"SYSTEMD_PAGER=",
	"GIT_TERMINAL_PROMPT=0",
	"DEBIAN_FRONTEND=noninteractive",
	"TERM=xterm-256color",
	"LANG=C.UTF-8",
	"HISTCONTROL=ignorespace",
	"PS1=",
}

// envEnd ends a complete environment save: a file without it was cut
// short (the shell was killed while writing) and is never copied to disk.
const envEnd = "# limbs: end of environment"

// shq quotes s for a POSIX shell.
func shq(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// bashRC is sourced by a fresh `bash --norc --noprofile -i` as its first
// line, so that no system or user rc file can change how the session
// behaves. It installs the markers: PS0 prints the start marker after a
// line is read and before it runs; the PROMPT_COMMAND function sends the
// status and cwd on the end-of-command channel (endchan.go) and then
// prints the end marker with that message's sequence number, before
// saving the exported environment for a replacement shell; the EXIT trap
// saves it and sends the cwd (X) when the shell exits in the middle of a
// command. The channel arrives as descriptor 3 and moves to endFD.
func bashRC(token, dir, rdir, cwd, envFile string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "exec %d>&3 3>&-\n__LIMBS_N=0\n", endFD)
	fmt.Fprintf(&b, "__LIMBS_T=%s\n__LIMBS_D=%s\n__LIMBS_R=%s\n__LIMBS_ENV_END=%s\nreadonly __LIMBS_T __LIMBS_D __LIMBS_R __LIMBS_ENV_END\n", shq(token), shq(dir), shq(rdir), shq(envEnd))
	// The command file, as the shortest word that can be typed.
	fmt.Fprintf(&b, "__L=%s\nreadonly __L\n", shq(filepath.Join(rdir, "cmd")))
	if envFile != "" {
		// The exported environment of the shell this one replaces.
		fmt.Fprintf(&b, ". %s 2>/dev/null\n", shq(envFile))
	}
	fmt.Fprintf(&b, "cd -- %s 2>/dev/null || cd 2>/dev/null\n", shq(cwd))
	b.WriteString(`HISTFILE="$__LIMBS_D/history"
HISTCONTROL=ignorespace
set +o histexpand
shopt -s checkwinsize
bind 'set enable-bracketed-paste off' 2>/dev/null
bind 'set bell-style none' 2>/dev/null
# limbs types C-x C-l to run the command file. On bash >= 5 a bind -x
# sets the whole line at once (readline redraws it in one write; a macro
# echoes it one byte per write), then C-j accepts it; older bash types the
# line with a macro.
if (( BASH_VERSINFO[0] >= 5 )); then
	bind -x '"\C-x\C-a": READLINE_LINE=" . \"\$__L\""; READLINE_POINT=${#READLINE_LINE}' 2>/dev/null
	bind -m vi-insert -x '"\C-x\C-a": READLINE_LINE=" . \"\$__L\""; READLINE_POINT=${#READLINE_LINE}' 2>/dev/null
	bind '"\C-x\C-l": "\C-x\C-a\C-j"' 2>/dev/null
	bind -m vi-insert '"\C-x\C-l": "\C-x\C-a\C-j"' 2>/dev/null
else
	bind '"\C-x\C-l": "\C-e\C-u . \"$__L\"\n"' 2>/dev/null
	bind -m vi-insert '"\C-x\C-l": "\C-e\C-u . \"$__L\"\n"' 2>/dev/null
fi
export -n PS1
PS1='\u@\h:\w\$ '
PS2='> '
PS0=$'\e]633;limbs;'"$__LIMBS_T"$';S\a'
__limbs_prompt() {
	local s=$? p=$PWD
	case $p in *[$'\a\e\n']*) p= ;; esac
	(( ${#p} > 1000 )) && p=
	((++__LIMBS_N))
	# The message first, from this very process (limbsd checks its pid),
	# then the marker that says where the output ends.
	printf 'E %s %s %s' "$__LIMBS_N" "$s" "$p" >&@FD@ ||
		printf 'limbs: this shell closed descriptor @FD@, which limbs needs to see a command end; restart the session\n' >&2
	printf '\e]633;limbs;%s;E;%s\a' "$__LIMBS_T" "$__LIMBS_N"
	# Saved after the end marker, off the result's path (export -p writes
	# a line per system call); the shell reads the next command only once
	# this is done, so no command of this shell can outrun the save.
	{ export -p; echo "$__LIMBS_ENV_END"; } >| "$__LIMBS_R/env" 2>/dev/null
}
__limbs_exit() {
	local p=$PWD
	case $p in *[$'\a\e\n']*) p= ;; esac
	(( ${#p} > 1000 )) && p=
	{ export -p; echo "$__LIMBS_ENV_END"; } >| "$__LIMBS_R/env" 2>/dev/null
	printf 'X %s %s' "$__LIMBS_N" "$p" >&@FD@ 2>/dev/null
	printf '\e]633;limbs;%s;X;%s\a' "$__LIMBS_T" "$__LIMBS_N"
}
PROMPT_COMMAND=__limbs_prompt
trap __limbs_exit EXIT
`)
	return strings.ReplaceAll(b.String(), "@FD@", strconv.Itoa(endFD))
}

// shRC is the ENV file of an interactive POSIX sh (dash, busybox ash) when
// bash is missing: the end marker lives in PS1 (parameter expansion gives
// the status and cwd); the start marker is the first line of each command
// file.
func shRC(token, cwd string) string {
	return fmt.Sprintf(`__LIMBS_T=%s
cd -- %s 2>/dev/null || cd 2>/dev/null
PS1="$(printf '\033]633;limbs;%%s;E;' "$__LIMBS_T")"'$?;$PWD'"$(printf '\007')"'$ '
`, shq(token), shq(cwd))
}

// writeFile writes data to path through a temporary file and a rename, so
// a reader never sees half of it.
func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
