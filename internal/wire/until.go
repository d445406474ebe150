package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Until is the "until" of exec, wait and input (docs/api.md "Waiting for
// what matters"): conditions limbsd evaluates on the live command, so
// that no client polls. The call returns as soon as one of those given
// holds (Result.Matched names it, with status running), or when the
// command ends, the yield passes or the command waits for input,
// whichever comes first. A nil field is a condition not asked for.
type Until struct {
	// Output is a Go regular expression (RE2 syntax) matched against each
	// line of the cleaned output this call returns, and the line being
	// written.
	Output *string `json:"output,omitempty"`
	// Port is a TCP port (1..65535) in LISTEN state in the sandbox's
	// network namespace.
	Port *int `json:"port,omitempty"`
	// Quiet is seconds without output (> 0).
	Quiet *float64 `json:"quiet,omitempty"`
	// Screen is a Go regular expression matched against the text of the
	// terminal's screen (its lines joined by \n).
	Screen *string `json:"screen,omitempty"`
}

// The conditions of Until, as Result.Matched names them.
const (
	MatchedOutput = "output"
	MatchedPort   = "port"
	MatchedQuiet  = "quiet"
	MatchedScreen = "screen"
)

// untilKeys are the JSON keys of Until.
var untilKeys = []string{MatchedOutput, MatchedPort, MatchedQuiet, MatchedScreen}

// UnmarshalJSON decodes an until object strictly: an unknown key is
// refused with the list of the known ones (a typo must not turn into a
// wait for nothing), and a value of the wrong type says what it takes.
func (u *Until) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return fmt.Errorf(`"until" must be an object such as {"port": 8000} or {"output": "REGEX"}`)
	}
	var unknown []string
	for k := range m {
		if !containsKey(untilKeys, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf(`"until" has no condition %q: the conditions are output (a regular expression on the output), port (a TCP port number), quiet (seconds without output) and screen (a regular expression on the screen)`, strings.Join(unknown, `", "`))
	}
	var v Until
	// field decodes key into dst and reports whether it was given.
	field := func(key, want string, dst any) (bool, error) {
		raw, ok := m[key]
		if !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			return false, nil
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			return false, fmt.Errorf(`"until.%s" must be %s, got %s`, key, want, clip(raw))
		}
		return true, nil
	}
	var out, scr string
	var port int
	var quiet float64
	for _, f := range []struct {
		key, want string
		dst       any
		set       func()
	}{
		{MatchedOutput, "a regular expression in a string", &out, func() { v.Output = &out }},
		{MatchedPort, "a TCP port number (1..65535)", &port, func() { v.Port = &port }},
		{MatchedQuiet, "a number of seconds (2.5 is two and a half)", &quiet, func() { v.Quiet = &quiet }},
		{MatchedScreen, "a regular expression in a string", &scr, func() { v.Screen = &scr }},
	} {
		given, err := field(f.key, f.want, f.dst)
		if err != nil {
			return err
		}
		if given {
			f.set()
		}
	}
	*u = v
	return nil
}

// Empty reports whether u asks for no condition (nil or {}).
func (u *Until) Empty() bool {
	return u == nil || u.Output == nil && u.Port == nil && u.Quiet == nil && u.Screen == nil
}

func containsKey(keys []string, k string) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

func clip(raw []byte) string {
	s := string(bytes.TrimSpace(raw))
	if len(s) > 60 {
		s = s[:60] + "..."
	}
	return s
}
