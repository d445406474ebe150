package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/limbs-dev/limbs/internal/wire"
)

func filesQuery(route string, kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	return "/files" + route + "?" + q.Encode()
}

// ReadFile streams the content of the file at path (absolute, or relative
// to the daemon's workdir). The caller closes it.
func (c *Client) ReadFile(ctx context.Context, path string) (io.ReadCloser, error) {
	resp, err := c.Do(ctx, http.MethodGet, filesQuery("", "path", path), nil, "")
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// WriteFile replaces the file at path with what r yields, atomically,
// creating its parents. mode 0 keeps the mode of the file it replaces
// (0644 for a new one). A non-empty ifMatch is the sha256 (hex) the file
// must still have, else the error wraps wire.ErrConflict. It returns the
// sha256 of what was written.
func (c *Client) WriteFile(ctx context.Context, path string, r io.Reader, mode os.FileMode, ifMatch string) (string, error) {
	m := ""
	if mode != 0 {
		m = fmt.Sprintf("%04o", uint32(mode.Perm())|setIDBits(mode))
	}
	resp, err := c.Do(ctx, http.MethodPut, filesQuery("", "path", path, "mode", m, "if_match", ifMatch), r, "application/octet-stream")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Header.Get("X-Limbs-Sha256"), nil
}

func setIDBits(m os.FileMode) uint32 {
	var v uint32
	if m&os.ModeSetuid != 0 {
		v |= 0o4000
	}
	if m&os.ModeSetgid != 0 {
		v |= 0o2000
	}
	if m&os.ModeSticky != 0 {
		v |= 0o1000
	}
	return v
}

// DeleteFile removes the file, symlink or empty directory at path; with
// recursive, a directory and everything in it.
func (c *Client) DeleteFile(ctx context.Context, path string, recursive bool) error {
	r := ""
	if recursive {
		r = "true"
	}
	return c.JSON(ctx, http.MethodDelete, filesQuery("", "path", path, "recursive", r), nil, nil)
}

// ListFiles lists what is under path, depth levels deep (0 means 1).
func (c *Client) ListFiles(ctx context.Context, path string, depth int) ([]wire.FileEntry, error) {
	d := ""
	if depth > 0 {
		d = strconv.Itoa(depth)
	}
	var out wire.FileList
	if err := c.JSON(ctx, http.MethodGet, filesQuery("/list", "path", path, "depth", d), nil, &out); err != nil {
		return nil, err
	}
	return out.Entries, nil
}

// GetArchive streams a tar of the directory at path. The caller closes it.
func (c *Client) GetArchive(ctx context.Context, path string) (io.ReadCloser, error) {
	resp, err := c.Do(ctx, http.MethodGet, filesQuery("/archive", "path", path), nil, "")
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// PutArchive extracts the tar that r yields under the directory at path.
// An entry that would land outside it refuses the whole archive.
func (c *Client) PutArchive(ctx context.Context, path string, r io.Reader) error {
	resp, err := c.Do(ctx, http.MethodPut, filesQuery("/archive", "path", path), r, "application/x-tar")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

// Edit runs one str_replace_editor command and returns its output. A
// refusal meant for the model (no match, bad line number, ...) is an error
// wrapping wire.ErrBadRequest whose message is the text to show the model.
func (c *Client) Edit(ctx context.Context, req wire.Edit) (string, error) {
	var out wire.EditResult
	if err := c.JSON(ctx, http.MethodPost, "/files/edit", req, &out); err != nil {
		return "", err
	}
	return out.Output, nil
}

// FileWatch is a stream of file events opened by Watch.
type FileWatch struct {
	body io.ReadCloser
	sc   *bufio.Scanner
}

// Watch follows create, write, remove and rename events under the
// directory at path, recursively. It returns once the daemon has set the
// watch up: every change after that is reported.
func (c *Client) Watch(ctx context.Context, path string) (*FileWatch, error) {
	resp, err := c.Do(ctx, http.MethodGet, filesQuery("/watch", "path", path), nil, "")
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	fw := &FileWatch{body: resp.Body, sc: sc}
	ev, err := fw.Next()
	if err != nil {
		fw.Close()
		return nil, fmt.Errorf("watching %s: %w", path, err)
	}
	if ev.Type != "ready" {
		fw.Close()
		return nil, fmt.Errorf("watching %s: the daemon began with a %q event instead of ready; is it a limbs daemon?", path, ev.Type)
	}
	return fw, nil
}

// Next blocks until the next event. It returns io.EOF when the stream
// ends (the directory was removed, or the daemon stopped).
func (fw *FileWatch) Next() (wire.WatchEvent, error) {
	for fw.sc.Scan() {
		line := fw.sc.Text()
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue // blank separators, comments, other SSE fields
		}
		var ev wire.WatchEvent
		if err := json.Unmarshal([]byte(strings.TrimSpace(data)), &ev); err != nil {
			return wire.WatchEvent{}, fmt.Errorf("watch stream: bad event %q: %w", data, err)
		}
		return ev, nil
	}
	if err := fw.sc.Err(); err != nil {
		return wire.WatchEvent{}, err
	}
	return wire.WatchEvent{}, io.EOF
}

// Close ends the watch.
func (fw *FileWatch) Close() error { return fw.body.Close() }
