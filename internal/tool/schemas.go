package tool

// The input schemas served to models. They are written out here, not read
// from testdata, so that the tests comparing them with the published
// sources in testdata can fail.

// textEditorSchema is Anthropic's text_editor_20250728 input (see
// testdata/text_editor_20250728.schema.json for its sources).
const textEditorSchema = `{
  "type": "object",
  "properties": {
    "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert"], "description": "The commands to run. Allowed options are: ` + "`view`, `create`, `str_replace`, `insert`" + `."},
    "path": {"type": "string", "description": "Absolute path to file or directory, e.g. ` + "`/repo/file.py` or `/repo`" + `."},
    "file_text": {"type": "string", "description": "Required parameter of ` + "`create`" + ` command, with the content of the file to be created."},
    "old_str": {"type": "string", "description": "Required parameter of ` + "`str_replace`" + ` command containing the string in ` + "`path`" + ` to replace."},
    "new_str": {"type": "string", "description": "Optional parameter of ` + "`str_replace`" + ` command containing the new string (if not given, no string will be added). Required parameter of ` + "`insert`" + ` command containing the string to insert."},
    "insert_line": {"type": "integer", "description": "Required parameter of ` + "`insert`" + ` command. The ` + "`insert_text`" + ` will be inserted AFTER the line ` + "`insert_line` of `path`" + `."},
    "insert_text": {"type": "string", "description": "Required parameter of ` + "`insert`" + ` command containing the text to insert."},
    "view_range": {"type": "array", "items": {"type": "integer"}, "description": "Optional parameter of ` + "`view`" + ` command when ` + "`path`" + ` points to a file. If none is given, the full file is shown. If provided, the file will be shown in the indicated line number range, e.g. [11, 12] will show lines 11 and 12. Indexing at 1 to start. Setting ` + "`[start_line, -1]` shows all lines from `start_line`" + ` to the end of the file."}
  },
  "required": ["command", "path"]
}`

// applyPatchSchema is the Codex apply_patch function form (see
// testdata/codex_apply_patch_function.schema.json).
const applyPatchSchema = `{
  "type": "object",
  "properties": {
    "input": {"type": "string", "description": "The entire contents of the apply_patch command"}
  },
  "required": ["input"],
  "additionalProperties": false
}`
