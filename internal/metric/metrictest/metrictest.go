// Package metrictest checks a collector's series in tests: it gathers them
// through a pedantic registry, which fails on a series the collector did
// not describe, looks one series up by its labels, and lints the names.
package metrictest

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// The value types a Sample names.
const (
	Counter = dto.MetricType_COUNTER
	Gauge   = dto.MetricType_GAUGE
)

// Sample is one expected series: its family, its labels, its type and its
// value.
type Sample struct {
	Name   string         // the family, such as "dthrottle_tags"
	Labels string         // name=value pairs sorted by name, "policy=login,result=ok"; "" for none
	Kind   dto.MetricType // Counter or Gauge
	Value  float64
}

// Gather registers cs on a pedantic registry of its own, as the admin
// endpoint registers them, and gathers them once, by family name.
func Gather(t testing.TB, cs ...prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	got, err := register(t, cs).Gather()
	if err != nil {
		t.Fatalf("gathering: %v", err)
	}
	fams := make(map[string]*dto.MetricFamily, len(got))
	for _, f := range got {
		fams[f.GetName()] = f
	}
	return fams
}

// Value returns the value of the series of fams that s names, failing the
// test when its family or its series is missing.
func Value(t testing.TB, fams map[string]*dto.MetricFamily, s Sample) float64 {
	t.Helper()
	f, ok := fams[s.Name]
	if !ok {
		t.Fatalf("%s: family missing", s.Name)
	}
	if f.GetType() != s.Kind {
		t.Errorf("%s: type %v, want %v", s.Name, f.GetType(), s.Kind)
	}
	for _, m := range f.GetMetric() {
		var pairs []string
		for _, l := range m.GetLabel() {
			pairs = append(pairs, l.GetName()+"="+l.GetValue())
		}
		if strings.Join(pairs, ",") != s.Labels {
			continue
		}
		switch s.Kind {
		case Counter:
			return m.GetCounter().GetValue()
		case Gauge:
			return m.GetGauge().GetValue()
		}
		t.Fatalf("%s: unexpected type %v", s.Name, s.Kind)
	}
	t.Fatalf("%s{%s}: series missing", s.Name, s.Labels)
	return 0
}

// Expect checks that fams holds every sample with its value.
func Expect(t testing.TB, fams map[string]*dto.MetricFamily, samples ...Sample) {
	t.Helper()
	for _, s := range samples {
		if got := Value(t, fams, s); got != s.Value {
			t.Errorf("%s{%s} = %v, want %v", s.Name, s.Labels, got, s.Value)
		}
	}
}

// Absent checks that fams holds no family whose name begins with prefix.
func Absent(t testing.TB, fams map[string]*dto.MetricFamily, prefix string) {
	t.Helper()
	for name := range fams {
		if strings.HasPrefix(name, prefix) {
			t.Errorf("%s served, want no %s* family", name, prefix)
		}
	}
}

// Lint fails the test for each way the series of cs break Prometheus's
// naming conventions (promlint), or for a series they did not describe.
func Lint(t testing.TB, cs ...prometheus.Collector) {
	t.Helper()
	problems, err := testutil.GatherAndLint(register(t, cs))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// register is a pedantic registry holding cs.
func register(t testing.TB, cs []prometheus.Collector) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			t.Fatalf("registering a collector: %v", err)
		}
	}
	return reg
}
