package wire

// The data of the agent.* events, which `limbs agent` sends to limbs serve
// (POST /v1/sandboxes/{id}/events, AppendEvents) as it runs. Every one
// names its run (Run: one `limbs agent` invocation) and its step (one
// model turn, from 1). None holds the model server's API key.

// AgentRequestData is the data of agent.request: one request to the model
// server (a retry is another), its metadata only.
type AgentRequestData struct {
	Run      string `json:"run"`
	Step     int    `json:"step"`
	Attempt  int    `json:"attempt"`
	Model    string `json:"model"`
	Host     string `json:"host,omitempty"` // the server's host[:port]
	Messages int    `json:"messages"`
	Chars    int    `json:"chars"`
	Tools    int    `json:"tools"`
}

// AgentMessageData is the data of agent.message: a message of the
// conversation. Role is system (the system prompt), user (the task),
// note (what the loop told the model: a stuck warning, a nudge) or
// assistant (the model's whole answer of a step, with the calls it made).
type AgentMessageData struct {
	Run   string          `json:"run"`
	Step  int             `json:"step"`
	Role  string          `json:"role"`
	Model string          `json:"model,omitempty"`
	Text  string          `json:"text"`
	Calls []AgentCallData `json:"calls,omitempty"`
}

// AgentCallData is the data of agent.tool_call: one call the model made,
// its arguments as the model sent them.
type AgentCallData struct {
	Run       string `json:"run,omitempty"`
	Step      int    `json:"step,omitempty"`
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// AgentObservationData is the data of agent.observation: the result of
// call CallID as the model got it. A result of a command names it
// (Session, Command), its exit code once it ended, and Shown, the byte
// ranges [from, to) of its output (0 = the command's first byte) that
// Text shows; the event's own Session and Command are the same.
type AgentObservationData struct {
	Run      string     `json:"run"`
	Step     int        `json:"step"`
	CallID   string     `json:"call_id"`
	Name     string     `json:"name"`
	Text     string     `json:"text"`
	IsError  bool       `json:"is_error,omitempty"`
	Refused  bool       `json:"refused,omitempty"`
	Session  string     `json:"session,omitempty"`
	Command  string     `json:"command,omitempty"`
	Status   string     `json:"status,omitempty"`
	ExitCode *int       `json:"exit_code,omitempty"`
	Shown    [][2]int64 `json:"shown,omitempty"`
	// OutputBytes is the size of the command's output so far.
	OutputBytes int64 `json:"output_bytes,omitempty"`
}

// AgentUsageData is the data of agent.usage: the tokens one request used,
// as the server counted them.
type AgentUsageData struct {
	Run              string `json:"run"`
	Step             int    `json:"step"`
	PromptTokens     int64  `json:"prompt_tokens"`
	CompletionTokens int64  `json:"completion_tokens"`
}

// AgentFinishedData is the data of agent.finished: how the run ended.
type AgentFinishedData struct {
	Run              string  `json:"run"`
	Reason           string  `json:"reason"` // finished, max_steps, stuck, cancelled...
	Message          string  `json:"message"`
	Steps            int     `json:"steps"`
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	Cost             float64 `json:"cost,omitempty"`
	DurationMs       int64   `json:"duration_ms"`
}

// AppendEvents is the body of POST /v1/sandboxes/{id}/events: events of
// the agent for the sandbox's log. Seq, Sandbox, Cursor and Cause are set
// by the log; Source is always agent.
type AppendEvents struct {
	Events []Event `json:"events"`
}

// AppendedEvents answers POST /v1/sandboxes/{id}/events: the seq of the
// last event appended.
type AppendedEvents struct {
	Last uint64 `json:"last"`
}
