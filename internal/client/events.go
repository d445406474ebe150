package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/limbs-dev/limbs/internal/wire"
)

// EventsQuery selects events of GET .../events: from a sequence number
// (a sandbox's log) or a cursor (every sandbox's, AllEvents), of some
// types ("command.*,output"; empty: all).
type EventsQuery struct {
	From  uint64
	Types string
	// Limit caps the events of one answer without follow (0: the
	// server's page, 10,000).
	Limit int
}

func (q EventsQuery) encode(follow bool) string {
	v := url.Values{}
	if q.From > 0 {
		v.Set("from", strconv.FormatUint(q.From, 10))
	}
	if q.Types != "" {
		v.Set("type", q.Types)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if follow {
		v.Set("follow", "true")
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}

// Events returns a page of a sandbox's event log (a deleted sandbox's too,
// within the control plane's retention); Next is the From of the next
// page.
func (s *Sandboxes) Events(ctx context.Context, idOrName string, q EventsQuery) (wire.EventList, error) {
	var l wire.EventList
	err := s.c.JSON(ctx, http.MethodGet, sandboxPath(idOrName, "/events"+q.encode(false)), nil, &l)
	return l, err
}

// AllEvents returns a page of the events of every sandbox from cursor
// q.From on; Next is the From of the next page.
func (s *Sandboxes) AllEvents(ctx context.Context, q EventsQuery) (wire.EventList, error) {
	var l wire.EventList
	err := s.c.JSON(ctx, http.MethodGet, "/events"+q.encode(false), nil, &l)
	return l, err
}

// FollowEvents calls fn with each event of a sandbox's log from q.From on,
// as they come, until ctx ends (nil then), fn fails (its error), or the
// stream breaks. To resume, follow again from the last event's Seq+1.
func (s *Sandboxes) FollowEvents(ctx context.Context, idOrName string, q EventsQuery, fn func(wire.Event) error) error {
	return s.follow(ctx, sandboxPath(idOrName, "/events"+q.encode(true)), fn)
}

// FollowAllEvents is FollowEvents across every sandbox, from cursor
// q.From on: resume from the last event's Cursor+1.
func (s *Sandboxes) FollowAllEvents(ctx context.Context, q EventsQuery, fn func(wire.Event) error) error {
	return s.follow(ctx, "/events"+q.encode(true), fn)
}

func (s *Sandboxes) follow(ctx context.Context, path string, fn func(wire.Event) error) error {
	resp, err := s.c.Do(ctx, http.MethodGet, path, nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var ev wire.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("GET %s: decoding an event: %w", path, err)
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := sc.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("GET %s: the stream broke: %w; follow again from the last event", path, err)
	}
	return fmt.Errorf("GET %s: the stream ended; follow again from the last event", path)
}
