package eventlog

import (
	"encoding/json"

	"github.com/limbs-dev/limbs/internal/secret"
	"github.com/limbs-dev/limbs/internal/wire"
)

func secretBytes(values []string) [][]byte { return secret.Forms(values) }

// maskEvent replaces the sandbox's secret values in ev's data: in the bytes
// of an output event, in every string of any other's. A value cut between
// two output events is not masked (output is coalesced into chunks of up
// to 64 KiB, which makes that rare; docs/events.md says so).
func maskEvent(ev wire.Event, forms [][]byte) wire.Event {
	if len(ev.Data) == 0 {
		return ev
	}
	if ev.Type == wire.EventOutput {
		var d wire.OutputData
		if json.Unmarshal(ev.Data, &d) == nil {
			d.Bytes = secret.MaskBytes(d.Bytes, forms)
			ev.Data, _ = json.Marshal(d)
			return ev
		}
	}
	var v any
	if err := json.Unmarshal(ev.Data, &v); err != nil {
		ev.Data = secret.MaskBytes(append(json.RawMessage(nil), ev.Data...), forms)
		return ev
	}
	b, err := json.Marshal(maskValue(v, forms))
	if err == nil {
		ev.Data = b
	}
	return ev
}

func maskValue(v any, forms [][]byte) any {
	switch x := v.(type) {
	case string:
		return string(secret.MaskBytes([]byte(x), forms))
	case []any:
		for i := range x {
			x[i] = maskValue(x[i], forms)
		}
	case map[string]any:
		for k, e := range x {
			x[k] = maskValue(e, forms)
		}
	}
	return v
}
