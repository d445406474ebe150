package secret

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestFormsOfEveryJSONEncoder: limbsd and limbs serve write their answers
// with HTML escaping off (wire.WriteJSON), other encoders with it on; a
// value with both a character JSON escapes (", \, a control character) and
// one only HTML escaping changes (<, >, &) has a different form in each,
// and must be masked in both.
func TestFormsOfEveryJSONEncoder(t *testing.T) {
	for _, sec := range []string{`a\b&c9`, `p"w<d>`, "tab\t&amp", "x&y\u2028z", `&<>&`} {
		forms := Forms([]string{sec})
		for _, html := range []bool{true, false} {
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(html)
			if err := enc.Encode(map[string]string{"output": "x " + sec + " y"}); err != nil {
				t.Fatal(err)
			}
			masked := MaskBytes(b.Bytes(), forms)
			var got map[string]string
			if err := json.Unmarshal(masked, &got); err != nil {
				t.Fatalf("%q (html escaping %v): masked answer is not JSON: %v: %s", sec, html, err, masked)
			}
			if got["output"] != "x *** y" {
				t.Errorf("%q (html escaping %v): masked to %q, want %q", sec, html, got["output"], "x *** y")
			}
		}
	}
}

func TestMaskLines(t *testing.T) {
	forms := Forms([]string{"s3cr3t-value"})
	in := []string{"x", "abc s3cr", "3t-v", "alue end", "s3cr3t-value alone", "keep"}
	got := MaskLines(in, forms)
	want := []string{"x", "abc ****", "****", "**** end", "s3cr3t-value alone", "keep"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %q, want %q", i, got[i], want[i])
		}
	}
	if in[1] != "abc s3cr" {
		t.Errorf("MaskLines changed its input: %q", in)
	}
}
