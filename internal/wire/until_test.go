package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestUntilJSON(t *testing.T) {
	for _, tc := range []struct {
		in, err string
	}{
		{`{"output": "ready", "port": 8000, "quiet": 2.5, "screen": "\\$ $"}`, ""},
		{`{}`, ""},
		{`{"port": null}`, ""},
		{`{"prot": 8000}`, `no condition "prot"`},
		{`{"port": "8000"}`, "TCP port number"},
		{`{"port": 8000.5}`, "TCP port number"},
		{`{"quiet": "2s"}`, "number of seconds"},
		{`{"output": 3}`, "regular expression in a string"},
		{`[8000]`, "must be an object"},
		{`null`, "must be an object"},
	} {
		var u Until
		err := json.Unmarshal([]byte(tc.in), &u)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v, want error %q", tc.in, err, tc.err)
		}
	}
	var u Until
	if err := json.Unmarshal([]byte(`{"output": "", "port": 0, "quiet": 0}`), &u); err != nil || u.Output == nil || u.Port == nil || u.Quiet == nil || u.Screen != nil {
		t.Errorf("zero values are given, not absent (so that they are refused as such): %+v %v", u, err)
	}
}

// FuzzUntilJSON: any client input decodes or fails without a panic, and
// what decodes encodes back to the same conditions.
func FuzzUntilJSON(f *testing.F) {
	for _, s := range []string{`{"output": "a+", "port": 1}`, `{"quiet": 1e308}`, `{"screen": null}`, `{"port": -1}`, `{`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var u Until
		if json.Unmarshal([]byte(s), &u) != nil {
			return
		}
		b, err := json.Marshal(u)
		if err != nil {
			t.Fatal(err)
		}
		var back Until
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s encodes to %s, which does not decode: %v", s, b, err)
		}
		b2, _ := json.Marshal(back)
		if string(b) != string(b2) {
			t.Fatalf("%s: %s then %s", s, b, b2)
		}
	})
}
