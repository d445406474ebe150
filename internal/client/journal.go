package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/limbs-dev/limbs/internal/wire"
)

// eventsQuery is the path of limbsd's GET /v1/events.
func eventsQuery(from uint64, follow, withBytes bool, limit int, batch time.Duration) string {
	q := url.Values{}
	q.Set("from", strconv.FormatUint(from, 10))
	if follow {
		q.Set("follow", "true")
	}
	if withBytes {
		q.Set("output", "bytes")
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if batch > 0 {
		q.Set("batch_ms", strconv.FormatInt(batch.Milliseconds(), 10))
	}
	return "/events?" + q.Encode()
}

// Events reads limbsd's journal from seq from on, at most limit events (0:
// the daemon's default); withBytes fills each output event's bytes.
func (c *Client) Events(ctx context.Context, from uint64, limit int, withBytes bool) (wire.EventList, error) {
	var l wire.EventList
	err := c.JSON(ctx, http.MethodGet, eventsQuery(from, false, withBytes, limit, 0), nil, &l)
	return l, err
}

// EventStream follows limbsd's journal (GET /v1/events?follow=true).
type EventStream struct {
	// Info is the stream's first line: the journal's id and bounds.
	Info wire.JournalInfo
	body io.ReadCloser
	br   *bufio.Reader
}

// FollowEvents follows limbsd's journal from seq from on. It returns once
// the daemon has named its journal (Info).
func (c *Client) FollowEvents(ctx context.Context, from uint64, withBytes bool) (*EventStream, error) {
	return c.FollowEventsBatched(ctx, from, withBytes, 0)
}

// FollowEventsBatched is FollowEvents with limbsd writing at most one batch
// of events every batch (whole milliseconds, at most a second): the first
// event after a quiet spell at once, those of a burst together, so that a
// busy journal costs its reader one wake-up per batch, not one per event.
func (c *Client) FollowEventsBatched(ctx context.Context, from uint64, withBytes bool, batch time.Duration) (*EventStream, error) {
	resp, err := c.Do(ctx, http.MethodGet, eventsQuery(from, true, withBytes, 0, batch), nil, "")
	if err != nil {
		return nil, err
	}
	es := &EventStream{body: resp.Body, br: bufio.NewReaderSize(resp.Body, 64<<10)}
	line, err := es.line()
	if err == nil {
		err = json.Unmarshal(line, &es.Info)
	}
	if err != nil || es.Info.Journal == "" {
		resp.Body.Close()
		return nil, fmt.Errorf("following events: the daemon did not begin with its journal's id (%v); is it a limbsd that keeps a journal?", err)
	}
	return es, nil
}

// MaxEventLine bounds one line of a followed journal: an event holds at
// most 64 KiB of text or of output bytes (base64), far below it. A longer
// line (a daemon that is not limbsd, or broken) ends the stream, so that
// whoever follows a sandbox's journal never holds more.
const MaxEventLine = 4 << 20

// line is the next line that is not blank (blank lines keep the
// connection alive).
func (es *EventStream) line() ([]byte, error) {
	for {
		var line []byte
		for {
			b, err := es.br.ReadSlice('\n')
			if len(line)+len(b) > MaxEventLine {
				return nil, fmt.Errorf("event stream: a line of more than %d bytes; is it a limbsd that keeps a journal?", MaxEventLine)
			}
			line = append(line, b...)
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if err != nil {
				return nil, err
			}
			break
		}
		if t := bytes.TrimSpace(line); len(t) > 0 {
			return t, nil
		}
	}
}

// Next blocks until the next event. It returns io.EOF (or the context's
// error) when the stream ends: the daemon stopped, or the caller left.
func (es *EventStream) Next() (wire.Event, error) {
	line, err := es.line()
	if err != nil {
		return wire.Event{}, err
	}
	var ev wire.Event
	if err := json.Unmarshal(line, &ev); err != nil {
		return wire.Event{}, fmt.Errorf("event stream: bad line %.200q: %w", line, err)
	}
	return ev, nil
}

// Buffered reports whether a whole event line is already read from the
// connection, so that Next returns it without waiting: a reader that
// batches reads on while it is true.
func (es *EventStream) Buffered() bool {
	b, _ := es.br.Peek(es.br.Buffered())
	return bytes.IndexByte(bytes.TrimLeft(b, " \t\r\n"), '\n') >= 0
}

// Close ends the stream.
func (es *EventStream) Close() error { return es.body.Close() }
