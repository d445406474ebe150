package main

import (
	"context"
	"fmt"

	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

// maxEventPages bounds fetchEvents: a server whose next never stops
// advancing must not keep the CLI reading for ever.
const maxEventPages = 1 << 20

// fetchEvents reads a sandbox's whole event log from limbs serve page by
// page (client.Sandboxes.Events: GET /v1/sandboxes/{id}/events?from=N)
// until a page is empty or next stops advancing. It is the one place
// export and replay read events.
func fetchEvents(ctx context.Context, c *client.Client, sandbox string, from uint64) ([]wire.Event, error) {
	var all []wire.Event
	for range maxEventPages {
		page, err := c.Sandboxes().Events(ctx, sandbox, client.EventsQuery{From: from})
		if err != nil {
			return nil, fmt.Errorf("reading the events of sandbox %s: %w", sandbox, err)
		}
		if len(page.Events) == 0 {
			return all, nil
		}
		for _, e := range page.Events {
			// A page that repeats what was read (a server answering from
			// an older from) must not duplicate output.
			if len(all) > 0 && e.Seq <= all[len(all)-1].Seq {
				continue
			}
			all = append(all, e)
		}
		next := page.Next
		if next == 0 {
			next = page.Events[len(page.Events)-1].Seq + 1
		}
		if next <= from {
			return all, nil
		}
		from = next
	}
	return all, fmt.Errorf("reading the events of sandbox %s: more than %d pages; export a shorter range", sandbox, maxEventPages)
}
