package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/endpoint"
	"github.com/limbs-dev/limbs/internal/wire"
)

// Defaults of the connection flags.
const (
	defaultDaemonAddr  = "unix:///run/limbs/limbsd.sock"
	defaultControlAddr = "127.0.0.1:7878"
	defaultSession     = "main"
)

// conn holds the flags every verb that talks to a daemon shares: where the
// API is, the token, which sandbox (through `limbs serve`) and which session.
type conn struct {
	addr        string
	token       string
	sandbox     string
	sessionName string
}

// connectFlags registers --addr, --token, --sandbox and --session on fs.
// Environment variables give the defaults, so that a shell can export them
// once.
func connectFlags(fs *flag.FlagSet) *conn {
	c := &conn{}
	fs.StringVar(&c.addr, "addr", os.Getenv("LIMBS_ADDR"), "API address: unix:///path/to.sock or HOST:PORT (env LIMBS_ADDR; default "+defaultDaemonAddr+", or "+defaultControlAddr+" with --sandbox)")
	// The token's default is read after parsing, never shown as a flag
	// default: -h and every flag typo print the defaults.
	fs.StringVar(&c.token, "token", "", "bearer token (env LIMBS_TOKEN; default: the limbsd.token file next to the socket, or with --sandbox limbs serve's token file)")
	fs.StringVar(&c.sandbox, "sandbox", os.Getenv("LIMBS_SANDBOX"), "sandbox id or name, reached through `limbs serve` (env LIMBS_SANDBOX)")
	fs.StringVar(&c.sessionName, "session", defaultSession, "session name or id (created on first use)")
	return c
}

// client returns an API client for the flags' endpoint.
func (c *conn) client() (*client.Client, error) {
	addr := c.addr
	if c.sandbox != "" {
		if addr == "" {
			addr = defaultControlAddr
		}
	}
	if addr == "" {
		addr = defaultDaemonAddr
	}
	token := c.token
	if token == "" {
		token = os.Getenv("LIMBS_TOKEN")
	}
	if token == "" {
		// The token files the daemons write: limbs serve's in its default
		// state dir, limbsd's next to its socket.
		path := tokenFile(defaultServeStateDir())
		if c.sandbox == "" {
			sock, ok := strings.CutPrefix(addr, "unix://")
			if !ok {
				return nil, fmt.Errorf("no token for %s: pass --token or set LIMBS_TOKEN", addr)
			}
			path = filepath.Join(filepath.Dir(sock), "limbsd.token")
		}
		var err error
		if token, err = endpoint.ReadTokenFile(path); err != nil {
			return nil, fmt.Errorf("no token: pass --token or set LIMBS_TOKEN (reading %s: %v)", path, err)
		}
	}
	cl, err := client.New(addr, token, "")
	if err != nil || c.sandbox == "" {
		return cl, err
	}
	return cl.Sandbox(c.sandbox), nil
}

// session returns the id of the flags' session, creating it when it does
// not exist yet.
func (c *conn) session(ctx context.Context, cl *client.Client) (string, error) {
	name := c.sessionName
	if name == "" {
		name = defaultSession
	}
	s, err := cl.GetSession(ctx, name)
	if err == nil {
		return s.ID, nil
	}
	if !errors.Is(err, wire.ErrNotFound) {
		return "", err
	}
	s, err = cl.CreateSession(ctx, wire.CreateSession{Name: name})
	if errors.Is(err, wire.ErrConflict) {
		// Someone else created it in between: use theirs.
		s, err = cl.GetSession(ctx, name)
	}
	if err != nil {
		return "", fmt.Errorf("creating session %q: %w", name, err)
	}
	return s.ID, nil
}

// hint is the command line of another verb on the same session, for
// messages that tell the user what to run next.
func (c *conn) hint(verb string) string {
	h := "limbs " + verb
	if c == nil {
		return h
	}
	if c.sandbox != "" {
		h += " --sandbox " + safe(c.sandbox)
	}
	name := c.sessionName
	if name == "" {
		name = defaultSession
	}
	return h + " --session " + safe(name)
}
