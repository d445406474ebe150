package tool

// The input schemas and descriptions of the profiles' own tools. Their
// properties, types, required lists and enums are those of the published
// sources in testdata/profiles (TestProfileSchemas); a description is
// limbs' own where the published one names something limbs does not have.

const anthropicBashSchema = `{
  "type": "object",
  "properties": {
    "command": {"type": "string", "description": "The bash command to run. Required unless the tool is being restarted."},
    "restart": {"type": "boolean", "description": "Specifying true will restart this tool. Otherwise, leave this unspecified."}
  }
}`

const anthropicBashDescription = `Run commands in a persistent bash session (cwd, environment and background jobs persist between calls). Each result is the command's output, then one bracketed line: the exit code, the cwd and how long it took. A command still running after its wait keeps running and the result says so: call bash with an empty command to wait for more, with command "C-c" to interrupt it; while it waits for input (a prompt, a pager, a full-screen program) the command you send is typed into it. restart: true starts a fresh shell.`

const codexExecSchema = `{
  "type": "object",
  "properties": {
    "cmd": {"type": "string", "description": "Shell command to execute."},
    "workdir": {"type": "string", "description": "Optional working directory to run the command in (a subshell started there); defaults to the shell's cwd."},
    "shell": {"type": "string", "description": "Commands run in the sandbox's bash session: leave this out (bash or sh are accepted)."},
    "login": {"type": "boolean", "description": "Accepted and ignored: the session's shell is set up already."},
    "tty": {"type": "boolean", "description": "Accepted and ignored: every command runs on a terminal (PTY)."},
    "yield_time_ms": {"type": "number", "description": "How long to wait (in milliseconds) for output before yielding. Default: 10000 for inspection commands, 30000 for builds and tests, 120000 for installs and downloads; the call returns earlier when the command ends or waits for input."},
    "max_output_tokens": {"type": "number", "description": "Maximum number of tokens to return. Excess output will be truncated (head and tail kept)."},
    "sandbox_permissions": {"type": "string", "description": "Accepted and ignored: the sandbox is the boundary, there is no approval step."},
    "justification": {"type": "string", "description": "Accepted and ignored: there is no approval step."}
  },
  "required": ["cmd"],
  "additionalProperties": false
}`

const codexExecDescription = `Runs a command in a PTY, returning output or a session ID for ongoing interaction. Commands run in one persistent bash session of the sandbox (cd and exports persist).`

const codexWriteStdinSchema = `{
  "type": "object",
  "properties": {
    "session_id": {"type": "number", "description": "Identifier of the running unified exec session."},
    "chars": {"type": "string", "description": "Bytes to write to stdin (may be empty to poll). A final newline is pressed as Enter; \\u0003 interrupts."},
    "yield_time_ms": {"type": "number", "description": "How long to wait (in milliseconds) for output before yielding. Default: the running command's yield; the call returns earlier when it ends or waits for input."},
    "max_output_tokens": {"type": "number", "description": "Maximum number of tokens to return. Excess output will be truncated."}
  },
  "required": ["session_id"],
  "additionalProperties": false
}`

const codexWriteStdinDescription = `Writes characters to an existing unified exec session and returns recent output.`

const openHandsBashSchema = `{
  "type": "object",
  "properties": {
    "command": {"type": "string", "description": "The bash command to execute. Can be empty string to view additional logs when previous exit code is ` + "`-1`" + `. Can be ` + "`C-c`" + ` (Ctrl+C) to interrupt the currently running process. Note: You can only execute one bash command at a time. If you need to run multiple commands sequentially, you can use ` + "`&&` or `;`" + ` to chain them together."},
    "is_input": {"type": "string", "enum": ["true", "false"], "description": "If True, the command is an input to the running process. If False, the command is a bash command to be executed in the terminal. Default is False."},
    "timeout": {"type": "number", "description": "Optional. Seconds to wait for the command before returning; the command keeps running after it (you can then wait longer, interact or interrupt it). If not provided: 10 for inspection commands, 30 for builds and tests, 120 for installs and downloads; the call returns earlier when the command ends or waits for input."},
    "security_risk": {"type": "string", "enum": ["LOW", "MEDIUM", "HIGH"], "description": "The LLM's assessment of the safety risk of this action. Accepted and not acted on: the sandbox is the boundary."}
  },
  "required": ["command", "security_risk"]
}`

const openHandsBashDescription = `Execute a bash command in the terminal within a persistent shell session.
* One command at a time: chain several with ` + "`&&` or `;`" + `.
* Persistent session: environment variables, virtual environments and the working directory persist between commands.
* Long running commands: if a command is not finished when the call returns (no exit code yet, OpenHands' -1), send an empty ` + "`command`" + ` to retrieve more output, or set ` + "`is_input`" + ` to ` + "`true`" + ` to send text to its STDIN or control keys like ` + "`C-c`" + ` (Ctrl+C), ` + "`C-d`, `C-z`" + `.
* Output truncation: a long output keeps its head and tail, and the result names the exact bytes left out.`

const openHandsEditorSchema = `{
  "type": "object",
  "properties": {
    "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert", "undo_edit"], "description": "The commands to run. Allowed options are: ` + "`view`, `create`, `str_replace`, `insert`, `undo_edit`" + `."},
    "path": {"type": "string", "description": "Absolute path to file or directory, e.g. ` + "`/workspace/file.py` or `/workspace`" + ` (a relative path is taken from the shell's working directory)."},
    "file_text": {"type": "string", "description": "Required parameter of ` + "`create`" + ` command, with the content of the file to be created."},
    "old_str": {"type": "string", "description": "Required parameter of ` + "`str_replace`" + ` command containing the string in ` + "`path`" + ` to replace."},
    "new_str": {"type": "string", "description": "Optional parameter of ` + "`str_replace`" + ` command containing the new string (if not given, no string will be added). Required parameter of ` + "`insert`" + ` command containing the string to insert."},
    "insert_line": {"type": "integer", "description": "Required parameter of ` + "`insert`" + ` command. The ` + "`new_str`" + ` will be inserted AFTER the line ` + "`insert_line` of `path`" + `."},
    "view_range": {"type": "array", "items": {"type": "integer"}, "description": "Optional parameter of ` + "`view`" + ` command when ` + "`path`" + ` points to a file. If none is given, the full file is shown. If provided, the file will be shown in the indicated line number range, e.g. [11, 12] will show lines 11 and 12. Indexing at 1 to start. Setting ` + "`[start_line, -1]` shows all lines from `start_line`" + ` to the end of the file."},
    "security_risk": {"type": "string", "enum": ["LOW", "MEDIUM", "HIGH"], "description": "The LLM's assessment of the safety risk of this action. Accepted and not acted on: the sandbox is the boundary."}
  },
  "required": ["command", "path", "security_risk"]
}`

const openHandsEditorDescription = `Custom editing tool for viewing, creating and editing files in plain-text format
* State is persistent across command calls and discussions with the user
* If ` + "`path`" + ` is a file, ` + "`view`" + ` displays the result of applying ` + "`cat -n`" + `. If ` + "`path`" + ` is a directory, ` + "`view`" + ` lists non-hidden files and directories up to 2 levels deep
* The ` + "`create`" + ` command cannot be used if the specified ` + "`path`" + ` already exists as a file
* If a ` + "`command`" + ` generates a long output, it will be truncated and marked with ` + "`<response clipped>`" + `
* The ` + "`undo_edit`" + ` command will revert the last edit made to the file at ` + "`path`" + `
* Tabs and CRLF line endings are kept as the file has them.
Notes for using the ` + "`str_replace`" + ` command:
* The ` + "`old_str`" + ` parameter should match EXACTLY one or more consecutive lines from the original file. Be mindful of whitespaces!
* If the ` + "`old_str`" + ` parameter is not unique in the file, the replacement will not be performed. Make sure to include enough context in ` + "`old_str`" + ` to make it unique
* The ` + "`new_str`" + ` parameter should contain the edited lines that should replace the ` + "`old_str`"
