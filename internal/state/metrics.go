package state

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dthrottle/dthrottle/internal/metric"
)

// This file owns the state file's metric families, read from Stats.

// NewCollector returns the state file's metrics, read from stats at each
// scrape; stats reports false while no state file is configured, and then
// nothing is sent. Once a file was read back on start:
//
//	dthrottle_state_load_tags                  gauge
//	dthrottle_state_load_bytes                 gauge
//	dthrottle_state_load_duration_seconds      gauge
//	dthrottle_state_load_age_seconds           gauge
//
// and once one was ignored:
//
//	dthrottle_state_ignored{reason}            gauge, always 1
//
// The collector is safe for concurrent use as long as stats is.
func NewCollector(stats func() (Stats, bool)) prometheus.Collector {
	var (
		loadTags    = metric.Gauge("state_load_tags", "Tags read back from the state file on start.")
		loadBytes   = metric.Gauge("state_load_bytes", "Size of the state file read back on start.")
		loadSeconds = metric.Gauge("state_load_duration_seconds", "How long reading the state file back took.")
		loadAge     = metric.Gauge("state_load_age_seconds", "How old the state file read back was when the daemon started.")
		ignored     = metric.Gauge("state_ignored", "1 when the state file was ignored on start, labelled with why: corrupt, truncated, version, future, stale, oversized, unreadable.", "reason")
	)
	families := []metric.Family{loadTags, loadBytes, loadSeconds, loadAge, ignored}
	return metric.NewCollector(families, func(emit metric.Emit) {
		st, on := stats()
		if !on {
			return
		}
		if st.Loaded {
			emit(loadTags, float64(st.Load.Tags))
			emit(loadBytes, float64(st.Load.Bytes))
			emit(loadSeconds, st.Load.Duration.Seconds())
			emit(loadAge, st.Load.Age.Seconds())
		}
		if st.Ignored != "" {
			emit(ignored, 1, metric.Label(st.Ignored))
		}
	})
}
