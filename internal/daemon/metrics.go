package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dthrottle/dthrottle/internal/bucket/tablemetric"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/metric"
	"github.com/dthrottle/dthrottle/internal/state"
)

// This file owns the daemon's own metric families (its build, its start
// and its reloads) and the list of the components' collectors the admin
// endpoint serves.

// collectors are the metric families the admin endpoint registers: the
// daemon's own, the table's, each way in's, the state file's and, with
// gossip on, unicast discovery's. The ways in and gossip are set at start
// (turning one on or off needs a restart), so the list is too; the state
// file follows reloads, and its collector asks at each scrape. The gossip
// node's families are the admin endpoint's, read from its Snapshot.
func (d *Daemon) collectors() []prometheus.Collector {
	cs := []prometheus.Collector{d.collector(), tablemetric.NewCollector(d.table), state.NewCollector(d.stateMetrics)}
	for _, w := range d.ways {
		cs = append(cs, w.metrics)
	}
	if g := d.gossip; g != nil {
		cs = append(cs, g.node.Collectors()...)
		cs = append(cs, transport.NewDiscoveryCollector(func() transport.DiscoveryStats {
			if g.unicast == nil {
				return transport.DiscoveryStats{}
			}
			return g.unicast.DiscoveryStats()
		}))
	}
	return cs
}

// collector returns the daemon's own metrics:
//
//	dthrottle_build_info{version}              gauge, always 1
//	dthrottle_start_time_seconds               gauge
//	dthrottle_config_reloads_total
//	dthrottle_config_reload_failures_total
func (d *Daemon) collector() prometheus.Collector {
	var (
		buildInfo      = metric.Gauge("build_info", "Always 1, labelled with the daemon's version.", "version")
		startTime      = metric.Gauge("start_time_seconds", "When the daemon started, seconds since the Unix epoch.")
		reloads        = metric.Counter("config_reloads_total", "Configuration reloads applied.")
		reloadFailures = metric.Counter("config_reload_failures_total", "Configuration reloads rejected, the running configuration kept.")
	)
	families := []metric.Family{buildInfo, startTime, reloads, reloadFailures}
	return metric.NewCollector(families, func(emit metric.Emit) {
		d.mu.Lock()
		ok, failed := d.reloads, d.reloadFailures
		d.mu.Unlock()
		emit(buildInfo, 1, metric.Label(d.version))
		if !d.started.IsZero() {
			emit(startTime, metric.Seconds(d.started))
		}
		emit(reloads, float64(ok))
		emit(reloadFailures, float64(failed))
	})
}

// stateMetrics is what the state file did, and whether one is configured
// now (state.file changes on reload).
func (d *Daemon) stateMetrics() (state.Stats, bool) {
	d.mu.Lock()
	on := d.cfg.State.File != ""
	d.mu.Unlock()
	return d.StateStats(), on
}
