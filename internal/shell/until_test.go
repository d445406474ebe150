package shell

import (
	"os"
	"path/filepath"
	"testing"
)

// TestListeningIn reads /proc/net/tcp and tcp6 text as the kernel writes
// it: only a socket in LISTEN state (0A) on the port counts, on any
// address, and the address is decoded from the kernel's word order.
func TestListeningIn(t *testing.T) {
	const tcp = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F41 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1
   2: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000 100 0 0 10 0
`
	const tcp6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:1F91 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5 1 0000000000000000 100 0 0 10 0
`
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v4, v6 := write("tcp", tcp), write("tcp6", tcp6)
	for _, tc := range []struct {
		path string
		port int
		want string
	}{
		{v4, 8000, "127.0.0.1:8000"},
		{v4, 8001, ""}, // established, not listening
		{v4, 22, "0.0.0.0:22"},
		{v4, 9000, ""},
		{v6, 8080, "[::]:8080"},
		{v6, 8081, "[::1]:8081"},
		{filepath.Join(dir, "missing"), 8000, ""},
	} {
		got, ok := listeningIn(tc.path, tc.port)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("listeningIn(%s, %d) = %q, %v; want %q", filepath.Base(tc.path), tc.port, got, ok, tc.want)
		}
	}
}

// TestOutputLineBound: the line being written keeps its newest untilLine
// bytes, whatever the sizes of the pieces it arrives in.
func TestOutputLineBound(t *testing.T) {
	o := &outputLines{}
	big := make([]byte, 3*untilLine)
	for i := range big {
		big[i] = 'a' + byte(i%26)
	}
	for _, piece := range []int{1, 100, untilLine - 1, untilLine, untilLine + 7, 3 * untilLine} {
		o.line = o.line[:0]
		for b := big; len(b) > 0; {
			n := min(piece, len(b))
			o.add(b[:n])
			b = b[n:]
			if len(o.line) > untilLine {
				t.Fatalf("pieces of %d: the line holds %d bytes, more than %d", piece, len(o.line), untilLine)
			}
		}
		if string(o.line) != string(big[len(big)-untilLine:]) {
			t.Errorf("pieces of %d: the line does not hold the newest %d bytes", piece, untilLine)
		}
	}
}
