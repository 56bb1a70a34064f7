package metric_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dthrottle/dthrottle/internal/metric"
	mt "github.com/dthrottle/dthrottle/internal/metric/metrictest"
)

// A collector describes every family it was given and sends what its
// function emits, with the prefix, the type and the labels of each family.
func TestCollector(t *testing.T) {
	var (
		hits  = metric.Counter("hits_total", "Hits.", "kind")
		level = metric.Gauge("level", "A level.")
		never = metric.Gauge("never", "Described, not sent.")
	)
	c := metric.NewCollector([]metric.Family{hits, level, never}, func(emit metric.Emit) {
		emit(hits, 3, "a")
		emit(hits, 4, metric.Label("b\xff"))
		emit(level, -1.5)
	})
	descs := make(chan *prometheus.Desc, 4)
	c.Describe(descs)
	close(descs)
	if n := len(descs); n != 3 {
		t.Errorf("%d families described, want 3", n)
	}
	fams := mt.Gather(t, c)
	mt.Expect(t, fams,
		mt.Sample{Name: "dthrottle_hits_total", Labels: "kind=a", Kind: mt.Counter, Value: 3},
		mt.Sample{Name: "dthrottle_hits_total", Labels: "kind=b\uFFFD", Kind: mt.Counter, Value: 4},
		mt.Sample{Name: "dthrottle_level", Kind: mt.Gauge, Value: -1.5},
	)
	mt.Absent(t, fams, "dthrottle_never")
	mt.Lint(t, c)
}

func TestSeconds(t *testing.T) {
	if got := metric.Seconds(time.Unix(1, 500_000_000)); got != 1.5 {
		t.Errorf("Seconds = %v, want 1.5", got)
	}
}
