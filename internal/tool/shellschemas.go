package tool

// The input schemas and descriptions of the shell tools.

const shellRunSchema = `{
  "type": "object",
  "properties": {
    "command": {"type": "string", "description": "Shell text to run: one line or many, heredocs, pipes, && chains."},
    "session": {"type": "string", "description": "Session name or id; default: this connection's own session."},
    "timeout": {"type": "number", "description": "Hard limit in seconds: the command is stopped when it passes. Default: none."},
    "yield": {"type": "number", "description": "Seconds to wait before answering 'still running' (the command keeps running). Default: 10 for inspection commands, 30 for builds and tests, 120 for installs and downloads."},
    "until": ` + untilSchema + `
  },
  "required": ["command"],
  "additionalProperties": false
}`

const shellInputSchema = `{
  "type": "object",
  "properties": {
    "text": {"type": "string", "description": "Characters to type into the terminal (sent before keys)."},
    "keys": {"type": "array", "items": {"type": "string"}, "description": "Keys to press after text: Enter, Tab, Escape, Backspace, Space, Up, Down, Left, Right, Home, End, PageUp, PageDown, Delete, C-a..C-z (C-c interrupts), M-x, F1..F12."},
    "session": {"type": "string", "description": "Session name or id; default: this connection's own session."},
    "yield": {"type": "number", "description": "Seconds to wait for the program's answer. Default: the running command's yield, 10 when none runs."},
    "until": ` + untilSchema + `
  },
  "additionalProperties": false
}`

const shellWaitSchema = `{
  "type": "object",
  "properties": {
    "session": {"type": "string", "description": "Session whose running command to wait for; default: this connection's own session."},
    "commands": {"type": "array", "items": {"type": "string"}, "description": "Command ids to wait for instead: c_N, or SESSION:c_N for a command of another session than the default one."},
    "yield": {"type": "number", "description": "Seconds to wait at most. Default: the command's yield."},
    "mode": {"type": "string", "enum": ["any", "all"], "description": "With commands: return when any (default) or all of them ended."},
    "until": ` + untilSchema + `
  },
  "additionalProperties": false
}`

const shellReadSchema = `{
  "type": "object",
  "properties": {
    "command": {"type": "string", "description": "Command id (c_N) from a shell_run, shell_input or shell_wait result."},
    "session": {"type": "string", "description": "The command's session, when it is not the default one."},
    "from": {"type": "integer", "description": "First byte of the command's raw output to read (0 = its start)."},
    "to": {"type": "integer", "description": "Byte to stop before. Default: the end."},
    "tail_lines": {"type": "integer", "description": "Show only the last N lines of the range."},
    "grep": {"type": "string", "description": "Show only the lines matching this regular expression (RE2), each prefixed by its byte offset."},
    "max_output": {"type": "integer", "description": "Most bytes of raw output to show (default 32768, at most 1048576); the result says where the next page starts."}
  },
  "required": ["command"],
  "additionalProperties": false
}`

const shellScreenSchema = `{
  "type": "object",
  "properties": {
    "session": {"type": "string", "description": "Session name or id; default: this connection's own session."}
  },
  "additionalProperties": false
}`

const sessionSchema = `{
  "type": "object",
  "properties": {
    "action": {"type": "string", "enum": ["create", "list", "restart", "close"], "description": "create a new shell session, list them, restart one's shell, or close one (killing its processes)."},
    "name": {"type": "string", "description": "The session's name (create: optional; restart and close: default this connection's own session)."}
  },
  "required": ["action"],
  "additionalProperties": false
}`

// untilSchema is the until property of shell_run, shell_input and
// shell_wait: limbsd's own conditions (docs/api.md "Waiting for what
// matters").
const untilSchema = `{"type": "object", "description": "Answer as soon as one of these holds while the command keeps running (checked inside the sandbox as output arrives; yield still bounds the wait, and the end of the command answers at once). Use it for servers, watchers and long jobs instead of guessing a yield.", "properties": {
      "output": {"type": "string", "description": "Regular expression (RE2) matched against each new line of output and the line being written, e.g. \"Listening on|ready\"."},
      "port": {"type": "integer", "minimum": 1, "maximum": 65535, "description": "A TCP port that is listening in the sandbox, e.g. 8000."},
      "quiet": {"type": "number", "exclusiveMinimum": 0, "description": "Seconds without any output."},
      "screen": {"type": "string", "description": "Regular expression matched against the terminal screen's text (a full-screen program, a menu)."}
    }, "additionalProperties": false}`

const runDescription = `Run a command in a persistent bash session (cwd, environment, functions and background jobs persist between calls). The result is the command's output as a person reads it, then one bracketed line of facts: the exit code (with the signal name for 128+N), the cwd after the command and how long it took. A command still running after ` + "`yield`" + ` seconds keeps running: the result says so, and shell_wait, shell_input or shell_read continue from there. With ` + "`until`" + ` it answers as soon as a log line, a listening port, a quiet spell or a screen shows up, while the command keeps running (for servers and watchers). A program waiting for input, a password prompt, a pager or a full-screen program is named with the input that answers or leaves it. Long output keeps its head and tail and names the exact byte range left out, which shell_read returns.`

const inputDescription = `Type text and press keys in the terminal of a session: answer a prompt, talk to a REPL, drive a full-screen program (vim, less, top), or interrupt with keys=["C-c"]. The result is what the program printed in reply, with the same facts as shell_run.`

const waitDescription = `Keep waiting for a running command without typing anything, up to ` + "`yield`" + ` seconds; returns at once when it ends, waits for input, or (with ` + "`until`" + `) shows what you wait for: a log line, a listening port, a quiet spell, a screen. With commands, waits for several commands (mode any or all).`

const readDescription = `Read the output of an earlier command losslessly, by byte offsets of its raw output (cleaned as shell_run shows it): a range (from, to), its last lines (tail_lines) or the lines matching a regular expression (grep). Use it for what a truncated result left out.`

const screenDescription = `Show the terminal screen of a session as a terminal would display it now: full-screen programs (vim, less, top) included, with the cursor position.`

const sessionDescription = `Manage shell sessions: create one (to run things in parallel), list them, restart one's shell (keeps cwd and exported variables, kills its jobs), or close one.`
