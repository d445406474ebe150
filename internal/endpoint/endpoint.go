// Package endpoint holds what the two HTTP servers of limbs, limbsd inside
// a sandbox and `limbs serve` on the host, do the same way at their door:
// check the bearer token, keep a generated token in a file, and open their
// listener (a Unix socket, or TCP on loopback unless told otherwise).
//
// It must never compare a token in time that depends on its bytes or its
// length, never write a token file another user can read, and never open a
// TCP listener beyond loopback without the caller saying so.
package endpoint

import (
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Token is a bearer token to check requests against. Only its hash is
// kept: comparing hashes takes the same time whatever the length of the
// token sent.
type Token struct {
	hash [sha256.Size]byte
	set  bool
}

// NewToken returns the check for want. An empty want refuses every
// request: a server without a token must not serve shells to anyone.
func NewToken(want string) Token {
	return Token{hash: sha256.Sum256([]byte(want)), set: want != ""}
}

// Check reports whether r carries "Authorization: Bearer TOKEN" with the
// token (spaces around it ignored).
func (t Token) Check(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && t.Equal(strings.TrimSpace(got))
}

// Equal compares got with the token in constant time, its length
// included.
func (t Token) Equal(got string) bool {
	h := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(h[:], t.hash[:]) == 1 && t.set
}

// ReadTokenFile returns the token in path, without the spaces and newline
// around it; an empty file is an error.
func ReadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty: remove it to have a new token generated, or pass --token", path)
	}
	return tok, nil
}

// WriteTokenFile generates a token (32 random bytes, in hex) and writes
// it to path, readable by its owner only, through a temporary file so
// that no reader sees half a token.
func WriteTokenFile(path string) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(b)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("creating the token's directory: %w", err)
	}
	tmp := path + ".tmp"
	_ = os.Remove(tmp) // a leftover would keep its old, maybe wider, mode
	if err := os.WriteFile(tmp, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("writing the token: %w; pass --token or LIMBS_TOKEN instead", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("writing the token: %w; pass --token or LIMBS_TOKEN instead", err)
	}
	return tok, nil
}

// ListenOptions say how Listen opens an address.
type ListenOptions struct {
	// SocketMode is the mode of a Unix socket (0: 0660).
	SocketMode os.FileMode
	// AllowRemote lets a TCP address be other than loopback.
	AllowRemote bool
	// Example is the --listen value error messages suggest for a Unix
	// socket, e.g. unix:///run/limbs/limbsd.sock.
	Example string
	// Name is what messages call a server already on the socket
	// ("daemon", "limbs serve"; default "server").
	Name string
}

// Listen opens addr: unix:///path/to.sock (creating its directory, and
// replacing a socket file nobody answers on any more) or HOST:PORT, which
// must be loopback unless o.AllowRemote is set.
func Listen(addr string, o ListenOptions) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		if path == "" {
			return nil, fmt.Errorf("--listen %q has no path: use %s", addr, o.Example)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, fmt.Errorf("creating the socket directory: %w", err)
		}
		if err := removeStaleSocket(path, cmp.Or(o.Name, "server")); err != nil {
			return nil, err
		}
		ln, err := net.Listen("unix", path)
		if err != nil {
			return nil, fmt.Errorf("listening on %s: %w", path, err)
		}
		mode := o.SocketMode
		if mode == 0 {
			mode = 0o660
		}
		if err := os.Chmod(path, mode); err != nil {
			ln.Close()
			return nil, fmt.Errorf("setting the socket's mode: %w", err)
		}
		return ln, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--listen %q: %v; use 127.0.0.1:PORT or unix:///path/to.sock", addr, err)
	}
	if !o.AllowRemote && !IsLoopback(host) {
		return nil, fmt.Errorf("--listen %q is not a loopback address: anyone who can reach it gets a shell; use 127.0.0.1:PORT, or add --allow-remote if you mean it", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w; is another %s running there? pass another --listen", addr, err, cmp.Or(o.Name, "server"))
	}
	return ln, nil
}

// IsLoopback reports whether host (a name or an IP) is this machine only.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// removeStaleSocket removes a socket file left by a server that died, and
// refuses to take over one that still answers or a file that is no socket.
func removeStaleSocket(path, name string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket; remove it or choose another --listen path", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("another %s is listening on %s; stop it first or choose another --listen path", name, path)
	}
	return os.Remove(path)
}
