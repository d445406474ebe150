package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/limbs-dev/limbs/internal/agent"
	"github.com/limbs-dev/limbs/internal/client"
	"github.com/limbs-dev/limbs/internal/wire"
)

// agentRecorder is the Recorder of a `limbs agent` run: against limbs
// serve (--sandbox, --image) the agent's events go to the sandbox's event
// log (POST /v1/sandboxes/{id}/events through cl, the sandbox's client);
// with --record FILE they are also written to FILE as JSON lines. Against
// one limbsd (--addr) without --record nothing is recorded: limbsd keeps
// no log of the agent's. It returns nil when there is nowhere to record,
// and a close that sends what is left (bounded in time).
func agentRecorder(f *agentFlags, cl *client.Client, run, task, system, key string, log *slog.Logger) (*agent.Recorder, func(), error) {
	var sinks []agent.Sink
	if f.cn.sandbox != "" {
		sinks = append(sinks, func(ctx context.Context, evs []wire.Event) error {
			var a wire.AppendedEvents
			return cl.JSON(ctx, http.MethodPost, "/events", wire.AppendEvents{Events: evs}, &a)
		})
	}
	var file *os.File
	if f.record != "" {
		var err error
		if file, err = os.OpenFile(f.record, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err != nil {
			return nil, nil, fmt.Errorf("--record: %w", err)
		}
		var mu sync.Mutex
		enc := json.NewEncoder(file)
		sinks = append(sinks, func(_ context.Context, evs []wire.Event) error {
			mu.Lock()
			defer mu.Unlock()
			for _, e := range evs {
				if err := enc.Encode(e); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if len(sinks) == 0 {
		return nil, func() {}, nil
	}
	if system == "" {
		system = agent.DefaultSystem
	}
	rec := agent.NewRecorder(agent.RecordOptions{
		Run: run, Model: f.model, System: system, Task: task, APIKey: key, Logger: log,
		Sink: func(ctx context.Context, evs []wire.Event) error {
			var first error
			for _, s := range sinks {
				if err := s(ctx, evs); err != nil && first == nil {
					first = err
				}
			}
			return first
		},
	})
	return rec, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		rec.Close(ctx)
		if file != nil {
			if err := file.Close(); err != nil {
				log.Warn("closing --record", "file", f.record, "err", err)
			}
		}
	}, nil
}
