// Package tablemetric holds the metric families of a bucket table: the
// queries each policy answered and the charges it took
// (bucket.Table.PolicyStats), and the table's size and evictions
// (bucket.Table.Stats). It lives apart from package bucket so that the
// table, and the client that decides in process with it, need no metrics
// library.
package tablemetric

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/metric"
)

// Table is what the collector reads at each scrape; *bucket.Table is one.
type Table interface {
	PolicyStats() []bucket.PolicyStats
	Stats() bucket.Stats
	QuotaStats() bucket.QuotaStats
}

var _ Table = (*bucket.Table)(nil)

// NewCollector returns t's metrics, read at each scrape:
//
//	dthrottle_queries_total{result="ok|no"}              queries decided by a policy
//	dthrottle_policy_queries_total{policy,result}        the same per policy
//	dthrottle_policy_dry_run_refused_total{policy}       what a dry run's limit would have refused
//	dthrottle_policy_charges_total{policy}               charges applied (Charge)
//	dthrottle_policy_charged_tokens_total{policy}        the tokens they took
//	dthrottle_tags                                       gauge, tags tracked
//	dthrottle_evictions_total                            tags evicted by max_tags
//	dthrottle_evicted_hits_total                         unreported hits lost with them
//	dthrottle_stated_limits                              gauge, distinct limits callers stated, in use
//	dthrottle_stated_limits_reclaimed_total              their slots taken back from limits no tag used
//	dthrottle_stated_limits_refused_total                limits refused for want of a slot
//
// It is safe for concurrent use if t is.
func NewCollector(t Table) prometheus.Collector {
	var (
		queries       = metric.Counter("queries_total", "Queries decided by a policy, by answer (empty tags are answered ok without a policy and not counted here).", "result")
		policyQueries = metric.Counter("policy_queries_total", "Queries decided by each policy, by answer.", "policy", "result")
		dryRunRefused = metric.Counter("policy_dry_run_refused_total", "Queries a dry-run policy served that its limit would have refused (also counted as ok).", "policy")
		charges       = metric.Counter("policy_charges_total", "Charges applied to each limit policy's buckets: costs paid after the response, never refused.", "policy")
		chargedTokens = metric.Counter("policy_charged_tokens_total", "Tokens taken from each limit policy's buckets by charges.", "policy")
		tags          = metric.Gauge("tags", "Tags tracked in the table.")
		evictions     = metric.Counter("evictions_total", "Tags evicted by the max_tags cap.")
		evictedHits   = metric.Counter("evicted_hits_total", "Unreported hits lost with evicted tags.")
		stated        = metric.Gauge("stated_limits", "Distinct limits callers stated with their requests, held by the table now (at most 16384).")
		reclaimed     = metric.Counter("stated_limits_reclaimed_total", "Slots of stated limits taken back from limits no tracked tag used.")
		refusedLimits = metric.Counter("stated_limits_refused_total", "Stated limits refused because 16384 others were in use.")
	)
	families := []metric.Family{queries, policyQueries, dryRunRefused, charges, chargedTokens, tags, evictions, evictedHits, stated, reclaimed, refusedLimits}
	return metric.NewCollector(families, func(emit metric.Emit) {
		// Policy names are unique in a valid config, but one may be named
		// like the default; sum rather than emit a series twice (a failed
		// scrape).
		type okNo struct{ ok, no, dry, charges, tokens uint64 }
		policies := t.PolicyStats()
		byName := make(map[string]okNo, len(policies))
		names := make([]string, 0, len(policies))
		var total okNo
		for _, p := range policies {
			name := metric.Label(p.Name)
			n, seen := byName[name]
			if !seen {
				names = append(names, name)
			}
			byName[name] = okNo{n.ok + p.OK, n.no + p.NO, n.dry + p.DryRunRefused, n.charges + p.Charges, n.tokens + p.ChargedTokens}
			total = okNo{ok: total.ok + p.OK, no: total.no + p.NO}
		}
		for _, name := range names {
			emit(policyQueries, float64(byName[name].ok), name, "ok")
			emit(policyQueries, float64(byName[name].no), name, "no")
			emit(dryRunRefused, float64(byName[name].dry), name)
			emit(charges, float64(byName[name].charges), name)
			emit(chargedTokens, float64(byName[name].tokens), name)
		}
		emit(queries, float64(total.ok), "ok")
		emit(queries, float64(total.no), "no")

		st := t.Stats()
		emit(tags, float64(st.Tags))
		emit(evictions, float64(st.Evictions))
		emit(evictedHits, float64(st.EvictedHits))
		qs := t.QuotaStats()
		emit(stated, float64(qs.InUse))
		emit(reclaimed, float64(qs.Reclaimed))
		emit(refusedLimits, float64(qs.Refused))
	})
}
