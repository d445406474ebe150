package metrics

import (
	"fmt"
	"io"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Parse reads a scrape in Prometheus' text format into its families, by
// name. Tests and `limbs bench` read /metrics with it.
func Parse(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing the scrape (is it Prometheus' text format?): %w", err)
	}
	return fams, nil
}

// Value is the value of the first series of fams[name] whose labels
// include labels (name, value pairs): a counter's or a gauge's value, a
// histogram's count of samples. ok is false when there is none.
func Value(fams map[string]*dto.MetricFamily, name string, labels ...string) (v float64, ok bool) {
next:
	for _, m := range fams[name].GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}
