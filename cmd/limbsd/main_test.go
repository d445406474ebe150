package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestListenRefusesRemoteWithoutFlag(t *testing.T) {
	for _, addr := range []string{":0", "0.0.0.0:0"} {
		_, _, err := listen(config{listen: addr})
		if err == nil || !strings.Contains(err.Error(), "--allow-remote") {
			t.Errorf("listen(%q) = %v, want a refusal naming --allow-remote", addr, err)
		}
	}
	ln, dir, err := listen(config{listen: "127.0.0.1:0", stateDir: "/state"})
	if err != nil {
		t.Fatalf("listen on loopback: %v", err)
	}
	ln.Close()
	if dir != "/state" {
		t.Errorf("token directory for TCP = %q, want the state dir", dir)
	}
}

func TestListenUnixSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "limbsd-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "sub", "limbsd.sock")
	cfg := config{listen: "unix://" + sock}

	ln, tokDir, err := listen(cfg)
	if err != nil {
		t.Fatalf("first listen: %v", err)
	}
	if tokDir != filepath.Dir(sock) {
		t.Errorf("token directory = %q, want the socket's %q", tokDir, filepath.Dir(sock))
	}
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o660 {
		t.Errorf("socket mode %v, want 0660", fi.Mode().Perm())
	}
	if _, _, err := listen(cfg); err == nil || !strings.Contains(err.Error(), "another daemon") {
		t.Errorf("listen on a live socket = %v, want a refusal", err)
	}
	// A daemon that died leaves its socket file behind: the next one
	// removes it.
	ul := ln.(*net.UnixListener)
	ul.SetUnlinkOnClose(false)
	ul.Close()
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("the stale socket should still exist for this test: %v", err)
	}
	ln, _, err = listen(cfg)
	if err != nil {
		t.Fatalf("listen over a stale socket: %v", err)
	}
	ln.Close()

	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := listen(config{listen: "unix://" + plain}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("listen over a regular file = %v, want a refusal that leaves it alone", err)
	}
	if _, err := os.Stat(plain); err != nil {
		t.Errorf("the regular file was removed: %v", err)
	}
}

func TestRunFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--version"}, exitOK},
		{[]string{"-h"}, exitOK},
		{[]string{"--no-such-flag"}, exitUsage},
		{[]string{"extra-arg"}, exitUsage},
		{[]string{"--log-level", "loud"}, exitUsage},
		{[]string{"--listen", "0.0.0.0:0", "--token", "x"}, exitError},
	} {
		if got := run(tc.args); got != tc.want {
			t.Errorf("limbsd %q exited %d, want %d", tc.args, got, tc.want)
		}
	}
}
