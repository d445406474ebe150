package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/limbs-dev/limbs/internal/wire"
)

// eventsQuery is the path of limbsd's GET /v1/events.
func eventsQuery(from uint64, follow, withBytes bool, limit int) string {
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
	return "/events?" + q.Encode()
}

// Events reads limbsd's journal from seq from on, at most limit events (0:
// the daemon's default); withBytes fills each output event's bytes.
func (c *Client) Events(ctx context.Context, from uint64, limit int, withBytes bool) (wire.EventList, error) {
	var l wire.EventList
	err := c.JSON(ctx, http.MethodGet, eventsQuery(from, false, withBytes, limit), nil, &l)
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
	resp, err := c.Do(ctx, http.MethodGet, eventsQuery(from, true, withBytes, 0), nil, "")
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

// line is the next line that is not blank (blank lines keep the
// connection alive).
func (es *EventStream) line() ([]byte, error) {
	for {
		b, err := es.br.ReadBytes('\n')
		if t := bytes.TrimSpace(b); len(t) > 0 && err == nil {
			return t, nil
		}
		if err != nil {
			return nil, err
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
