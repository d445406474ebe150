package endpoint

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTokenCheck(t *testing.T) {
	const want = "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name   string
		want   string
		header string
		ok     bool
	}{
		{"right token", want, "Bearer " + want, true},
		{"right token, spaces around it", want, "Bearer  " + want + " ", true},
		{"wrong token of the same length", want, "Bearer " + strings.Repeat("x", len(want)), false},
		{"one byte off", want, "Bearer " + want[:len(want)-1] + "0", false},
		{"a prefix of the token", want, "Bearer " + want[:8], false},
		{"the token and more", want, "Bearer " + want + "00", false},
		{"empty token sent", want, "Bearer ", false},
		{"no header", want, "", false},
		{"not a bearer token", want, "Basic " + want, false},
		{"lower-case scheme", want, "bearer " + want, false},
		{"server without a token, empty sent", "", "Bearer ", false},
		{"server without a token, none sent", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/v1/sessions", nil)
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			if got := NewToken(tc.want).Check(r); got != tc.ok {
				t.Errorf("Check with Authorization %q = %v, want %v", tc.header, got, tc.ok)
			}
		})
	}
}

func TestTokenEqualHidesTheLength(t *testing.T) {
	// What Equal compares is the hash: the same number of bytes whatever
	// was sent, so that the time cannot tell the token's length.
	tok := NewToken("secret")
	if tok.Equal("") || tok.Equal("secre") || tok.Equal("secret!") || !tok.Equal("secret") {
		t.Error("Equal does not tell the token from its prefixes and extensions")
	}
	if NewToken("").Equal("") {
		t.Error("an empty token accepts the empty string")
	}
}

func TestIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.1.2.3": true, "::1": true, "localhost": true,
		"": false, "0.0.0.0": false, "::": false, "10.0.0.1": false, "example.com": false,
	} {
		if got := IsLoopback(host); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestWriteAndReadTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d", "limbsd.token")
	tok, err := WriteTokenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) != 64 {
		t.Errorf("token %q: want 32 random bytes in hex", tok)
	}
	got, err := ReadTokenFile(path)
	if err != nil || got != tok {
		t.Errorf("ReadTokenFile = %q, %v; want %q", got, err, tok)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", fi.Mode().Perm())
	}
	again, err := WriteTokenFile(path)
	if err != nil || again == tok {
		t.Errorf("second token %q, %v: want a fresh one", again, err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadTokenFile(empty); err == nil {
		t.Error("an empty token file gave a token")
	}
}

func TestListen(t *testing.T) {
	for _, addr := range []string{":0", "0.0.0.0:0"} {
		if _, err := Listen(addr, ListenOptions{}); err == nil || !strings.Contains(err.Error(), "--allow-remote") {
			t.Errorf("Listen(%q) = %v, want a refusal naming --allow-remote", addr, err)
		}
	}
	ln, err := Listen("127.0.0.1:0", ListenOptions{})
	if err != nil {
		t.Fatalf("listen on loopback: %v", err)
	}
	ln.Close()

	dir, err := os.MkdirTemp("", "endpoint-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "sub", "x.sock")
	o := ListenOptions{SocketMode: 0o600, Name: "limbs serve"}
	ln, err = Listen("unix://"+sock, o)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket %v, %v: want mode 0600", fi, err)
	}
	if _, err := Listen("unix://"+sock, o); err == nil || !strings.Contains(err.Error(), "another limbs serve") {
		t.Errorf("Listen on a live socket = %v, want a refusal naming limbs serve", err)
	}
	if _, err := Listen("unix://", ListenOptions{Example: "unix:///run/x.sock"}); err == nil || !strings.Contains(err.Error(), "unix:///run/x.sock") {
		t.Errorf("Listen without a path = %v, want the example", err)
	}
}
