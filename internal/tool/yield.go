package tool

import (
	"path"
	"regexp"
	"strings"
)

// YieldClass names what kind of command a yield default was chosen for.
type YieldClass string

// The yield policy (see the package doc): how long shell_run waits for a
// command before it answers "still running", when the model gives no
// yield.
const (
	YieldQuick   YieldClass = "quick"   // inspection: ls, cat, grep, git status, ...
	YieldBuild   YieldClass = "build"   // builds, tests and anything not listed
	YieldInstall YieldClass = "install" // installs and downloads: apt-get install, pip install, curl, git clone, ...
)

// Seconds is the yield of a class.
func (c YieldClass) Seconds() float64 {
	switch c {
	case YieldQuick:
		return 10
	case YieldInstall:
		return 120
	}
	return 30
}

// DefaultYield classifies command by the first word(s) of each of its
// simple commands (split at newlines, ;, &&, ||, |, & and parentheses) and
// returns the slowest class found and its yield in seconds. Leading
// variable assignments and wrappers (sudo, env, time, nohup, nice, exec,
// command, timeout N) are skipped, paths are reduced to the program's
// name, and `python -m MODULE` counts as MODULE. A command with no word
// of a listed program is a build (30 s), the daemon's own default.
func DefaultYield(command string) (YieldClass, float64) {
	best := YieldQuick
	seen := false
	for _, seg := range segmentSep.Split(command, -1) {
		w := programWords(strings.Fields(seg))
		if len(w) == 0 {
			continue
		}
		seen = true
		c := classify(w)
		if rank(c) > rank(best) {
			best = c
		}
	}
	if !seen {
		best = YieldBuild
	}
	return best, best.Seconds()
}

var segmentSep = regexp.MustCompile("[\n;|&(){}`]+")

func rank(c YieldClass) int {
	switch c {
	case YieldQuick:
		return 0
	case YieldBuild:
		return 1
	}
	return 2
}

// programWords drops what runs before the program itself.
func programWords(w []string) []string {
	for len(w) > 0 {
		first := w[0]
		switch {
		case isAssignment(first):
			w = w[1:]
		case len(w) == 1 && (first == "env" || first == "time"):
			return w // env alone prints the environment
		case first == "sudo" || first == "env" || first == "time" || first == "nohup" || first == "exec" || first == "command" || first == "nice" || first == "!":
			w = w[1:]
			for len(w) > 0 && strings.HasPrefix(w[0], "-") {
				w = w[1:]
			}
		case first == "timeout":
			w = w[1:]
			for len(w) > 0 && strings.HasPrefix(w[0], "-") {
				w = w[1:]
			}
			if len(w) > 0 {
				w = w[1:] // the duration
			}
		default:
			w = append([]string{path.Base(first)}, w[1:]...)
			if strings.HasPrefix(w[0], "python") && len(w) > 2 && w[1] == "-m" {
				w = w[2:]
			}
			return w
		}
	}
	return nil
}

func isAssignment(s string) bool {
	i := strings.IndexByte(s, '=')
	if i <= 0 {
		return false
	}
	for j, r := range s[:i] {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || j > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// quickPrograms only look at things.
var quickPrograms = set("ls", "ll", "la", "cat", "head", "tail", "pwd", "cd", "echo", "printf",
	"grep", "egrep", "fgrep", "rg", "ag", "find", "fd", "wc", "sort", "uniq", "cut", "awk",
	"sed", "tr", "diff", "cmp", "which", "type", "whereis", "printenv", "export", "set",
	"unset", "alias", "env", "ps", "df", "du", "free", "uptime", "stat", "file", "date", "whoami",
	"id", "uname", "hostname", "true", "false", "test", "[", "mkdir", "rm", "cp", "mv", "ln",
	"touch", "chmod", "chown", "readlink", "realpath", "basename", "dirname", "jq", "tree",
	"xxd", "od", "hexdump", "md5sum", "sha1sum", "sha256sum", "kill", "jobs", "history",
	"less", "more", "man", "nl", "column", "tee", "yes", "seq", "lsof", "ss", "netstat")

// quickSub are subcommands that only look, of programs that also build or
// download.
var quickSub = map[string]map[string]bool{
	"git":    set("status", "log", "diff", "show", "branch", "remote", "rev-parse", "config", "ls-files", "blame", "tag", "describe", "grep", "stash", "reflog", "shortlog"),
	"go":     set("version", "env", "doc", "fmt", "help"),
	"docker": set("ps", "images", "inspect", "logs", "version", "info"),
	"npm":    set("ls", "list", "view", "config", "help", "version"),
	"pip":    set("list", "show", "freeze", "help"),
	"pip3":   set("list", "show", "freeze", "help"),
	"cargo":  set("version", "help", "tree", "metadata"),
}

// installPrograms download whatever they do.
var installPrograms = set("apt", "apt-get", "aptitude", "dnf", "yum", "apk", "pacman", "zypper",
	"brew", "snap", "port", "conda", "mamba", "micromamba", "curl", "wget", "aria2c", "rsync",
	"scp", "rustup", "nix", "nix-env", "pipx")

// installSub are subcommands that install or download.
var installSub = map[string]map[string]bool{
	"git":      set("clone", "fetch", "pull", "submodule", "lfs"),
	"pip":      set("install", "download", "wheel"),
	"pip3":     set("install", "download", "wheel"),
	"uv":       set("pip", "sync", "add", "install", "tool", "venv"),
	"poetry":   set("install", "add", "update", "lock"),
	"pipenv":   set("install", "sync", "update"),
	"npm":      set("install", "i", "ci", "add", "update", "exec", "x"),
	"npx":      nil, // downloads the package it runs: see classify
	"yarn":     set("install", "add", "upgrade"),
	"pnpm":     set("install", "i", "add", "update", "dlx"),
	"bun":      set("install", "i", "add", "update", "x"),
	"cargo":    set("install", "fetch", "update", "add"),
	"go":       set("get", "install", "mod"),
	"gem":      set("install", "update"),
	"bundle":   set("install", "update"),
	"composer": set("install", "require", "update"),
	"docker":   set("pull", "push", "build", "compose"),
	"nvm":      set("install"),
}

func classify(w []string) YieldClass {
	p := w[0]
	sub := ""
	if len(w) > 1 {
		sub = w[1]
	}
	switch {
	case installPrograms[p], p == "npx", installSub[p][sub]:
		return YieldInstall
	case p == "yarn" && sub == "": // bare yarn installs
		return YieldInstall
	case quickPrograms[p], quickSub[p][sub]:
		return YieldQuick
	}
	return YieldBuild
}

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}
