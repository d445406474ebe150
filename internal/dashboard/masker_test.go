package dashboard

import (
	"bytes"
	"testing"

	"github.com/limbs-dev/limbs/internal/secret"
)

// TestMaskerFrames: a value cut across frames is masked, and the offset
// the masker keeps is the raw stream's.
func TestMaskerFrames(t *testing.T) {
	forms := secret.Forms([]string{"sk-0123456789"})
	m := &masker{forms: func() [][]byte { return forms }, at: 100}
	var out []byte
	raw := []string{"key=sk-01", "23456789 ok\r\n", "s"}
	adjusted := false
	for _, f := range raw {
		b, adj := m.next([]byte(f))
		out = append(out, b...)
		adjusted = adjusted || adj
	}
	if bytes.Contains(out, []byte("sk-0")) || !bytes.Contains(out, []byte("key=*** ok")) {
		t.Errorf("masked stream %q", out)
	}
	if !adjusted {
		t.Error("masking shortened the stream but the offset was not reported")
	}
	// The last "s" may begin the value: held, then flushed.
	if m.at != 100+int64(len("key=sk-0123456789 ok\r\n")) {
		t.Errorf("offset %d before the flush", m.at)
	}
	b, _ := m.flush()
	if string(b) != "s" || m.at != 100+int64(len("key=sk-0123456789 ok\r\ns")) {
		t.Errorf("flush %q, offset %d", b, m.at)
	}
	// Without secrets nothing is held.
	m = &masker{forms: func() [][]byte { return nil }}
	if b, adj := m.next([]byte("sk-0")); string(b) != "sk-0" || adj || m.at != 4 {
		t.Errorf("no secrets: %q %v %d", b, adj, m.at)
	}
}
