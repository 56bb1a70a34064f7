// Package metric is what the components' Prometheus collectors share: a
// family (a description and a value type) and a collector that reads its
// values once per scrape. Each component defines its own families, next
// to the counters they show (bucket/tablemetric, serve, protocol,
// httpapi, spoe, rls, state, internal/gossip/transport, internal/daemon),
// and the admin endpoint registers the collectors it is given.
package metric

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Prefix begins the name of every family of the daemon.
const Prefix = "dthrottle_"

// Family is one metric family: its description and its value type. The
// zero Family is not usable: make one with Counter or Gauge. A Family is
// a plain value, safe to copy and to use from several goroutines.
type Family struct {
	desc *prometheus.Desc
	kind prometheus.ValueType
}

// Counter is the counter family Prefix+name with the given help text and
// label names.
func Counter(name, help string, labels ...string) Family {
	return newFamily(name, help, prometheus.CounterValue, labels)
}

// Gauge is the gauge family Prefix+name with the given help text and label
// names.
func Gauge(name, help string, labels ...string) Family {
	return newFamily(name, help, prometheus.GaugeValue, labels)
}

func newFamily(name, help string, kind prometheus.ValueType, labels []string) Family {
	return Family{prometheus.NewDesc(Prefix+name, help, labels, nil), kind}
}

// Emit sends one series of f: its value v and its label values, in the
// order f names them.
type Emit func(f Family, v float64, labels ...string)

// Collector is a prometheus.Collector over a fixed list of families, whose
// values a function emits at each scrape. Create it with NewCollector; it
// is safe for concurrent use as long as that function is.
type Collector struct {
	families []Family
	collect  func(Emit)
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector that describes families and, at each
// scrape, calls collect to emit their series. collect emits only the
// families given here (a family it leaves out is simply absent from that
// scrape).
func NewCollector(families []Family, collect func(Emit)) *Collector {
	return &Collector{families: families, collect: collect}
}

// Describe sends every family the collector may emit.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range c.families {
		ch <- f.desc
	}
}

// Collect sends the series collect emits now.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.collect(func(f Family, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(f.desc, f.kind, v, labels...)
	})
}

// Label makes s a valid label value: Prometheus requires UTF-8, so each
// invalid byte becomes U+FFFD.
func Label(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// Seconds is t in seconds since the Unix epoch.
func Seconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
