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
	fmt.Fprintf(&b, "__L=%s\n__LZ=%s\nreadonly __L __LZ\n", shq(filepath.Join(rdir, "cmd")), shq(filepath.Join(rdir, "end")))
	macro := strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(runLine)
	fmt.Fprintf(&b, "__LIMBS_LINE=%s\n__LIMBS_MACRO=%s\nreadonly __LIMBS_LINE __LIMBS_MACRO\n", shq(runLine), shq(macro))
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
export -n PS1
PS1='\u@\h:\w\$ '
PS2='> '
__LIMBS_S=$'\e]633;limbs;'"$__LIMBS_T"$';S\a'
readonly __LIMBS_S
__LIMBS_DONE=
PROMPT_COMMAND=
# The end file defines limbs' functions; __limbs_z installs the rest:
# the keys limbs types, PS0 and PROMPT_COMMAND.
. "$__LZ" 2>/dev/null
__limbs_z 2>/dev/null
trap __limbs_exit EXIT
`)
	return b.String()
}

// runLine is the line the C-x C-l key puts on the command line to run a
// command: it ends the command itself instead of leaving that to
// PROMPT_COMMAND, which users rewrite (PROMPT_COMMAND="history -a;
// $PROMPT_COMMAND" would clobber $?, PROMPT_COMMAND="" would lose the
// end). __limbs_a saves the shell's options, turns xtrace off, so that
// the trace shows the user's commands only, and turns functrace on,
// because source (.) hides a DEBUG trap while it reads a file unless
// functrace is on when it starts; the command file's first step
// (cmdPrefix) puts both back as the shell had them, so the command runs
// as bash -c runs a script: a DEBUG trap fires for its own simple
// commands and not in subshells, substitutions or function bodies (unless
// the user set -T). The file is sourced, not eval'd: in a sourced file
// the shell is not interactive (no job numbers for `cmd &`, as under
// bash -c) and LINENO counts from 1. The status of the sourced file is
// the command's own status, which __limbs_z sends, or the end file when
// a command removed the function. limbs' steps write their stderr to
// /dev/null, which is where xtrace writes their trace; each names
// __limbs_ or the command file, which the DEBUG, RETURN and ERR trap
// wrappers (endFileText) skip. Its last step resets the ERR trap when the
// command reset it (the trap wrapper cannot: endFileText).
const runLine = ` { __limbs_a; } 2>/dev/null; . "$__L"; { __limbs_s=$?; __limbs_z || . "$__LZ"; ${__limbs_er:+builtin trap - ERR}; } 2>/dev/null`

// cmdPrefix starts the command file, on its first line so that LINENO
// stays the user's: functrace and xtrace back as the shell had them. Each
// step names __limbs_ (a DEBUG trap skips it); no function call, so that
// __limbs_z has one function fewer to check. bash prints PS0, and so the
// start marker, on its stderr: when that is not a terminal (exec 2>file,
// exec 2>&-) or PS0 lacks the marker (readonly PS0=), the file prints it
// on stdout, or every later result would have no output; on /dev/tty
// when stdout is no terminal either (exec >file 2>&1), or the command
// would never start, and so never end.
const cmdPrefix = `[[ -t 2 && ${PS0-} == *"$__LIMBS_S"* ]] || { [[ -t 1 ]] && builtin printf %s "$__LIMBS_S" || builtin printf %s "$__LIMBS_S" >/dev/tty; } 2>/dev/null || :; { [[ ${__limbs_x-} == *T* ]] || ${__limbs_q-}builtin set +T; [[ ${__limbs_x-} != *x* ]] || ${__limbs_q-}builtin set -x; } 2>/dev/null; `

func endFile() string {
	return strings.ReplaceAll(endFileText, "@FD@", strconv.Itoa(endFD))
}

// endFileText defines limbs' functions; the rc sources it, and so does
// runLine when a command removed __limbs_z. __limbs_z sends the end (the
// message, then the marker) when runLine set __limbs_s, saves the
// exported environment, and puts back every part of the integration a
// command may have changed: the keys limbs types, the start marker in
// PS0, its functions and its PROMPT_COMMAND entry (for commands a person
// types on an attached terminal). Its stderr is /dev/null (runLine).
//
// trap wraps the action of a DEBUG, RETURN or ERR trap so that it does
// not fire for limbs' own steps: a DEBUG trap runs before every simple
// command (runLine has a few), an ERR trap for eval's status too, and a
// RETURN trap when the wrapper itself returns (it has the trace
// attribute) and, under set -T, when limbs' functions return. The
// action skips a step whose function, file or text names limbs, and
// runs the user's text otherwise with the caller's stderr and $?; its
// own test writes its trace to /dev/null, so set -x shows what bash -c
// shows. trap -p shows the wrapped action.
const endFileText = `__limbs_a() {
	__limbs_x=$- __limbs_er=
	set +x -T
}
__limbs_z() {
	if [[ -n ${__limbs_s+x} ]]; then
		local p=$PWD
		case $p in *[$'\a\e\n']*) p= ;; esac
		(( ${#p} > 1000 )) && p=
		((++__LIMBS_N))
		# No 2>/dev/null of its own: stderr is /dev/null already here
		# (runLine), and each redirection costs the shell some ten
		# system calls on the result's path.
		builtin printf 'E %s %s %s' "$__LIMBS_N" "$__limbs_s" "$p" >&@FD@
		builtin printf '\e]633;limbs;%s;E;%s;%s\a' "$__LIMBS_T" "$__LIMBS_N" "$__limbs_s"
		__LIMBS_DONE=1
		# Saved after the end marker, off the result's path (export -p
		# writes a line per system call); the shell reads the next command
		# only once this is done, so no command of this shell can outrun
		# the save.
		{ builtin export -p; builtin echo "$__LIMBS_ENV_END"; } >| "$__LIMBS_R/env"
	fi
	builtin unset __limbs_x __limbs_s
	# One line written per name: as few functions as can be.
	# The end file calls __limbs_z when __limbs_s is set, which it still
	# is when builtin itself was disabled (enable -n builtin): __limbs_zd,
	# set by assignment (no builtin), keeps that from recursing.
	builtin declare -F __limbs_a __limbs_prompt __limbs_exit trap bind 1>&2 || { __limbs_zd=1; . "$__LZ"; __limbs_zd=; }
	# The keys limbs types, in the emacs and the vi-insert keymaps
	# whatever the editing mode (set -o vi needs no new binding), only
	# when a bind may have changed them (the bind wrapper, the end file
	# sourced): a bind call costs as much as the rest of __limbs_z.
	if [[ -n ${__limbs_kd-} ]]; then
		__limbs_kd=
		local m
		for m in emacs vi-insert; do
			if (( BASH_VERSINFO[0] >= 5 )); then
				builtin bind -m "$m" -x '"\C-x\C-a": READLINE_LINE=$__LIMBS_LINE; READLINE_POINT=${#READLINE_LINE}'
				builtin bind -m "$m" '"\C-x\C-l": "\C-x\C-a\C-x\C-b"'
			else
				builtin bind -m "$m" '"\C-x\C-l": "\C-e\C-u'"$__LIMBS_MACRO"'\C-x\C-b"'
			fi
			builtin bind -m "$m" '"\C-x\C-b": accept-line'
		done
	fi
	[[ ${PS0-} == *"$__LIMBS_S"* ]] || PS0=$__LIMBS_S${PS0-}
	[[ ${PROMPT_COMMAND-} == *__limbs_prompt* ]] || PROMPT_COMMAND="{ __limbs_prompt; } 2>/dev/null${PROMPT_COMMAND:+; $PROMPT_COMMAND}"
}
# bind marks the keys for __limbs_z to bind again; like trap, it writes
# its own trace to /dev/null. A builtin bind bypasses it.
bind() {
	{ __limbs_kd=1; builtin bind "$@" 2>&250; } 250>&2 2>/dev/null
}
__limbs_prompt() {
	local s=$? p=$PWD
	if [[ -n $__LIMBS_DONE ]]; then
		# limbs ran this command, and __limbs_z sent its end.
		__LIMBS_DONE=
		return
	fi
	case $p in *[$'\a\e\n']*) p= ;; esac
	(( ${#p} > 1000 )) && p=
	((++__LIMBS_N))
	# The message first, from this very process (limbsd checks its pid),
	# then the marker that says where the output ends.
	builtin printf 'E %s %s %s' "$__LIMBS_N" "$s" "$p" >&@FD@ 2>/dev/null
	builtin printf '\e]633;limbs;%s;E;%s;%s\a' "$__LIMBS_T" "$__LIMBS_N" "$s"
	{ builtin export -p; builtin echo "$__LIMBS_ENV_END"; } >| "$__LIMBS_R/env" 2>/dev/null
}
__limbs_exit() {
	local p=$PWD
	case $p in *[$'\a\e\n']*) p= ;; esac
	(( ${#p} > 1000 )) && p=
	{ builtin export -p; builtin echo "$__LIMBS_ENV_END"; } >| "$__LIMBS_R/env" 2>/dev/null
	builtin printf 'X %s %s' "$__LIMBS_N" "$p" >&@FD@ 2>/dev/null
	builtin printf '\e]633;limbs;%s;X;%s\a' "$__LIMBS_T" "$__LIMBS_N"
}
trap() {
	# The body writes its trace and errors to /dev/null (set -x shows
	# the call only, as for the builtin), and the builtin's errors to
	# the caller's stderr (250).
	{
		local __limbs_t=("$@") __limbs_q __limbs_d=() __limbs_re=() __limbs_e=() __limbs_n=() __limbs_r=0 __limbs_k=
		if [[ ${__limbs_t[0]-} == -- ]]; then
			__limbs_t=("${__limbs_t[@]:1}")
		elif [[ ${__limbs_t[0]-} == -?* ]]; then
			__limbs_t=()
		fi
		# trap SIG resets SIG.
		(( ${#__limbs_t[@]} != 1 )) || [[ -z ${__limbs_t[0]} ]] || __limbs_t=(- "${__limbs_t[0]}")
		if (( ${#__limbs_t[@]} >= 2 )) && [[ ${__limbs_t[0]} == *[!0-9]* || -z ${__limbs_t[0]} ]]; then
			__limbs_k=1
			for __limbs_q in "${__limbs_t[@]:1}"; do
				case ${__limbs_q^^} in
				DEBUG) __limbs_d+=("$__limbs_q") ;;
				RETURN) __limbs_re+=("$__limbs_q") ;;
				ERR) __limbs_e+=("$__limbs_q") ;;
				*) __limbs_n+=("$__limbs_q") ;;
				esac
			done
		fi
		if [[ -z $__limbs_k || -z ${__limbs_t[0]} ]]; then
			builtin trap "$@" 2>&250 || __limbs_r=$?
			[[ -z $__limbs_k || ${#__limbs_e[@]} == 0 ]] || __limbs_er=
		elif [[ ${__limbs_t[0]} == - ]]; then
			# Called at the top level (sourced files aside), not in a
			# function?
			__limbs_k=1
			for __limbs_q in "${FUNCNAME[@]:1}"; do
				[[ $__limbs_q == source ]] || __limbs_k=
			done
			if (( ${#__limbs_e[@]} )) && [[ $- != *E* && -n $__limbs_k ]]; then
				# bash puts back on return the ERR trap a function without
				# errtrace resets: ignore it now, reset it at the end of
				# the command (runLine).
				builtin trap -- '' "${__limbs_e[@]}" 2>&250 || __limbs_r=$?
				__limbs_er=1 __limbs_e=()
			fi
			__limbs_n+=("${__limbs_d[@]}" "${__limbs_re[@]}" "${__limbs_e[@]}")
			if (( ${#__limbs_n[@]} )); then
				builtin trap - "${__limbs_n[@]}" 2>&250 || __limbs_r=$?
			fi
		else
			# The wrapped action skips limbs' steps. A RETURN or ERR
			# action sets __limbs_in while its test runs (in a
			# redirection, which fires no DEBUG trap), so that a DEBUG
			# trap skips the test too, and clears it before the
			# user's text.
			(( ${#__limbs_e[@]} == 0 )) || __limbs_er=
			if (( ${#__limbs_d[@]} )); then
				builtin trap -- '{ case ${__limbs_in:-0}:${FUNCNAME-}:${BASH_SOURCE-}:$BASH_COMMAND${__L:0:$((__limbs_in=0,0))} in 1:*|?:trap:*|?:bind:*|*__limbs_*|*__LIMBS_*|*:"$__LZ":*|*'\''. "$__L"'\''|*'\''. "$__LZ"'\'') ;; *) {
'"${__limbs_t[0]}"'
} 2>&250 250>&- ;; esac; } 250>&2 2>/dev/null' "${__limbs_d[@]}" 2>&250 || __limbs_r=$?
			fi
			__limbs_re+=("${__limbs_e[@]}")
			if (( ${#__limbs_re[@]} )); then
				builtin trap -- '{ case ${FUNCNAME-}:${BASH_SOURCE-}:$BASH_COMMAND${__L:0:$((__limbs_in=0,0))} in trap:*|bind:*|*__limbs_*|*__LIMBS_*|*:"$__LZ":*|*'\''. "$__L"'\''|*'\''. "$__LZ"'\'') ;; *) {
'"${__limbs_t[0]}"'
} 2>&250 250>&- ;; esac; } 250>&2 2>/dev/null${__L:0:$((__limbs_in=1,0))}' "${__limbs_re[@]}" 2>&250 || __limbs_r=$?
			fi
			if (( ${#__limbs_n[@]} )); then
				builtin trap -- "${__limbs_t[0]}" "${__limbs_n[@]}" 2>&250 || __limbs_r=$?
			fi
		fi
		return "$__limbs_r"
	} 250>&2 2>/dev/null
}
# The trace attribute keeps a DEBUG or RETURN trap set by the function
# after it returns (bash puts back the caller's otherwise).
builtin declare -ft trap
__limbs_kd=1
if [[ -n ${__limbs_s+x} && -z ${__limbs_zd-} ]]; then
	__limbs_z
fi
`

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
