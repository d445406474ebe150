package fakellm

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

var parallel = Script{Turns: []Turn{{Text: "Two at once.", Calls: []Call{
	{ID: "c1", Name: "shell_run", Arguments: json.RawMessage(`{"command": "make test", "session": "a"}`)},
	{ID: "c2", Name: "shell_run", Arguments: json.RawMessage(`{"command": "ls", "session": "b"}`)},
}}}}

// TestWireFormat: the raw SSE stream is OpenAI's: a data line per
// chunk, each tool call opened with its index, id and name and empty
// arguments, then arguments alone in pieces, finish_reason, a usage
// chunk with no choices, and [DONE].
func TestWireFormat(t *testing.T) {
	s, err := Start(parallel)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	resp, err := http.Post(s.URL+"/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	type delta struct {
		Content   *string `json:"content"`
		ToolCalls []struct {
			Index    *int    `json:"index"`
			ID       *string `json:"id"`
			Type     *string `json:"type"`
			Function struct {
				Name      *string `json:"name"`
				Arguments *string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	}
	type chunk struct {
		Object  string `json:"object"`
		Choices []struct {
			Delta        delta   `json:"delta"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage *struct {
			TotalTokens int `json:"total_tokens"`
		} `json:"usage"`
	}
	var chunks []chunk
	done := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if l == "" {
			continue
		}
		d, ok := strings.CutPrefix(l, "data: ")
		if !ok || done {
			t.Fatalf("line %q (after [DONE]: %v)", l, done)
		}
		if d == "[DONE]" {
			done = true
			continue
		}
		var c chunk
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatalf("%q: %v", d, err)
		}
		chunks = append(chunks, c)
	}
	if !done {
		t.Fatal("no [DONE]")
	}
	last := chunks[len(chunks)-1]
	if len(last.Choices) != 0 || last.Usage == nil || last.Usage.TotalTokens == 0 {
		t.Errorf("the last chunk is not the usage chunk: %+v", last)
	}
	fin := chunks[len(chunks)-2].Choices[0].FinishReason
	if fin == nil || *fin != "tool_calls" {
		t.Errorf("finish_reason %v", fin)
	}
	opened, pieces := map[int]bool{}, map[int]int{}
	for _, c := range chunks {
		for _, ch := range c.Choices {
			for _, tc := range ch.Delta.ToolCalls {
				i := *tc.Index
				if tc.ID != nil {
					if opened[i] || tc.Function.Name == nil || *tc.Function.Arguments != "" || *tc.Type != "function" {
						t.Errorf("opening chunk of call %d: %+v", i, tc)
					}
					opened[i] = true
					continue
				}
				if !opened[i] || tc.Function.Name != nil || tc.Function.Arguments == nil {
					t.Errorf("argument chunk of call %d: %+v", i, tc)
				}
				pieces[i]++
			}
		}
	}
	if len(opened) != 2 || pieces[0] < 2 || pieces[1] < 2 {
		t.Errorf("calls opened %v, argument pieces %v: want 2 calls in several pieces", opened, pieces)
	}
}

// TestOfficialAccumulator: openai-go's own stream accumulator rebuilds
// the parallel calls from the stream.
func TestOfficialAccumulator(t *testing.T) {
	s, err := Start(parallel)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cl := openai.NewClient(option.WithBaseURL(s.URL+"/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	st := cl.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var acc openai.ChatCompletionAccumulator
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	m := acc.Choices[0].Message
	if m.Content != "Two at once." || len(m.ToolCalls) != 2 || acc.Usage.TotalTokens == 0 {
		t.Fatalf("accumulated %+v, usage %+v", m, acc.Usage)
	}
	for i, want := range []string{`{"command": "make test", "session": "a"}`, `{"command": "ls", "session": "b"}`} {
		if got := m.ToolCalls[i].Function.Arguments; got != want {
			t.Errorf("call %d arguments %q, want %q", i, got, want)
		}
	}
	if r := s.Requests(); len(r) != 1 || !r[0].IncludeUsage || !r[0].Authorized {
		t.Errorf("requests %+v", r)
	}
}
