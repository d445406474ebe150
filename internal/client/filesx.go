package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"

	"github.com/limbs-dev/limbs/internal/wire"
)

// FileStore is the Files API seen as whole files with etags (the hex
// sha256 that if_match takes): the shape the agent tools edit through
// (tool.Files). Reads are limited to MaxRead bytes.
type FileStore struct {
	c *Client
	// MaxRead is the largest file ReadFile returns; a larger one is an
	// error wrapping wire.ErrTooLarge.
	MaxRead int64
}

// DefaultMaxRead is FileStore's MaxRead unless set.
const DefaultMaxRead = 16 << 20

// FileStore returns c's files as whole files with etags.
func (c *Client) FileStore() *FileStore {
	return &FileStore{c: c, MaxRead: DefaultMaxRead}
}

// ReadFile returns the content of the file at p and its sha256 (hex),
// computed from the bytes read: the daemon replaces files by rename, so
// one read sees one version whole.
func (s *FileStore) ReadFile(ctx context.Context, p string) ([]byte, string, error) {
	rc, err := s.c.ReadFile(ctx, p)
	if err != nil {
		return nil, "", err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, s.MaxRead+1))
	if err != nil {
		return nil, "", fmt.Errorf("reading %s: %w", p, err)
	}
	if int64(len(data)) > s.MaxRead {
		return nil, "", fmt.Errorf("%s is larger than %d bytes: %w", p, s.MaxRead, wire.ErrTooLarge)
	}
	sum := sha256.Sum256(data)
	return data, hex.EncodeToString(sum[:]), nil
}

// WriteFile replaces the file at p with data; a non-empty ifMatch is the
// sha256 it must still have (else the error wraps wire.ErrConflict). It
// returns the sha256 of what was written.
func (s *FileStore) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode, ifMatch string) (string, error) {
	etag, err := s.c.WriteFile(ctx, p, bytes.NewReader(data), mode, ifMatch)
	if err != nil {
		return "", err
	}
	if etag == "" { // a daemon that does not send X-Limbs-Sha256
		sum := sha256.Sum256(data)
		etag = hex.EncodeToString(sum[:])
	}
	return etag, nil
}

// DeleteFile removes the file or symlink at p (not recursively).
func (s *FileStore) DeleteFile(ctx context.Context, p string) error {
	return s.c.DeleteFile(ctx, p, false)
}

// Stat describes what is at p. The Files API lists a file as its own
// entry and a directory as its children, so a listing that is not p's own
// entry means p is a directory.
func (s *FileStore) Stat(ctx context.Context, p string) (wire.FileEntry, error) {
	p = path.Clean(p)
	es, err := s.c.ListFiles(ctx, p, 1)
	if errors.Is(err, wire.ErrTooLarge) { // only a directory lists too much
		return wire.FileEntry{Path: p, Name: path.Base(p), Type: "dir"}, nil
	}
	if err != nil {
		return wire.FileEntry{}, err
	}
	if len(es) == 1 && path.Clean(es[0].Path) == p {
		return es[0], nil
	}
	return wire.FileEntry{Path: p, Name: path.Base(p), Type: "dir"}, nil
}

// List returns what is under the directory dir, depth levels deep.
func (s *FileStore) List(ctx context.Context, dir string, depth int) ([]wire.FileEntry, error) {
	return s.c.ListFiles(ctx, dir, depth)
}
