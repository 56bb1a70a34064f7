package tablemetric

import (
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	mt "github.com/dthrottle/dthrottle/internal/metric/metrictest"
)

func at(sec float64) time.Time {
	return time.Unix(1700000000, 0).Add(time.Duration(sec * float64(time.Second)))
}

// metricsTable is a table of one tag (so each new tag evicts the last)
// that has answered, at t0:
//
//	a a a           default: ok ok no (2 unreported hits)
//	login:1 x2      login: ok no; evicts a (2 hits)
//	try:1 x2        try, a dry run: ok ok, the second over its limit; evicts login:1 (1 hit)
//	x:1             deny, also named default: no
//	ok:1            allow, named with an invalid byte: ok
func metricsTable(t *testing.T) *bucket.Table {
	t.Helper()
	tb, err := bucket.New(bucket.Config{Default: bucket.Policy{Rate: 1, Burst: 2}, MaxTags: 1, MaxTagBytes: 256,
		Policies: []bucket.Policy{
			{Name: "login", Prefix: "login:", Rate: 1, Burst: 1},
			{Name: "try", Prefix: "try:", Rate: 1, Burst: 1, DryRun: true},
			{Name: "default", Prefix: "x:", Action: bucket.Deny},
			{Name: "bad\xff", Prefix: "ok:", Action: bucket.Allow},
		}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"a", "a", "a", "login:1", "login:1", "try:1", "try:1", "x:1", "ok:1"} {
		tb.Allow(at(0), []byte(tag))
	}
	// A limit stated for a tag of the deny policy: refused, and not kept.
	tb.AllowQuota(at(0), []byte("x:2"), bucket.Request{Quota: bucket.Quota{Burst: 5, Rate: 1}, Hits: 1})
	return tb
}

func TestCollector(t *testing.T) {
	fams := mt.Gather(t, NewCollector(metricsTable(t)))
	const c, g = mt.Counter, mt.Gauge
	mt.Expect(t, fams,
		mt.Sample{Name: "dthrottle_queries_total", Labels: "result=ok", Kind: c, Value: 6},
		mt.Sample{Name: "dthrottle_queries_total", Labels: "result=no", Kind: c, Value: 4},
		// The deny policy named like the default is summed with it, not
		// sent as a second series.
		mt.Sample{Name: "dthrottle_policy_queries_total", Labels: "policy=default,result=ok", Kind: c, Value: 2},
		mt.Sample{Name: "dthrottle_policy_queries_total", Labels: "policy=default,result=no", Kind: c, Value: 3},
		mt.Sample{Name: "dthrottle_policy_queries_total", Labels: "policy=login,result=ok", Kind: c, Value: 1},
		mt.Sample{Name: "dthrottle_policy_queries_total", Labels: "policy=login,result=no", Kind: c, Value: 1},
		mt.Sample{Name: "dthrottle_policy_queries_total", Labels: "policy=try,result=ok", Kind: c, Value: 2},
		mt.Sample{Name: "dthrottle_policy_queries_total", Labels: "policy=try,result=no", Kind: c, Value: 0},
		mt.Sample{Name: "dthrottle_policy_queries_total", Labels: "policy=bad\uFFFD,result=ok", Kind: c, Value: 1},
		mt.Sample{Name: "dthrottle_policy_dry_run_refused_total", Labels: "policy=default", Kind: c, Value: 0},
		mt.Sample{Name: "dthrottle_policy_dry_run_refused_total", Labels: "policy=try", Kind: c, Value: 1},
		mt.Sample{Name: "dthrottle_policy_charges_total", Labels: "policy=login", Kind: c, Value: 0},
		mt.Sample{Name: "dthrottle_policy_charged_tokens_total", Labels: "policy=login", Kind: c, Value: 0},
		mt.Sample{Name: "dthrottle_tags", Kind: g, Value: 1},
		mt.Sample{Name: "dthrottle_evictions_total", Kind: c, Value: 2},
		mt.Sample{Name: "dthrottle_evicted_hits_total", Kind: c, Value: 3},
		mt.Sample{Name: "dthrottle_stated_limits", Kind: g, Value: 0},
		mt.Sample{Name: "dthrottle_stated_limits_reclaimed_total", Kind: c, Value: 0},
		mt.Sample{Name: "dthrottle_stated_limits_refused_total", Kind: c, Value: 0},
	)
	if n := len(fams); n != 11 {
		t.Errorf("%d families, want 11", n)
	}
}

// The families follow Prometheus's naming conventions, and the collector
// sends only what it describes.
func TestCollectorLint(t *testing.T) {
	mt.Lint(t, NewCollector(metricsTable(t)))
}

// TestCharges: charges are counted per policy, apart from the queries.
func TestCharges(t *testing.T) {
	tb, err := bucket.New(bucket.Config{Default: bucket.Policy{Rate: 1, Burst: 2}, MaxTags: 100, MaxTagBytes: 256,
		Policies: []bucket.Policy{{Name: "llm", Prefix: "llm:", Rate: 10, Burst: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	tb.Allow(at(0), []byte("a"))
	tb.Charge(at(0), []byte("a"), 5)
	tb.Allow(at(0), []byte("a"))
	tb.Charge(at(0), []byte("llm:k"), 70)
	tb.Charge(at(0), []byte("llm:k"), 80)
	tb.Charge(at(0), []byte("llm:k"), 0)
	mt.Expect(t, mt.Gather(t, NewCollector(tb)),
		mt.Sample{Name: "dthrottle_policy_charges_total", Labels: "policy=default", Kind: mt.Counter, Value: 1},
		mt.Sample{Name: "dthrottle_policy_charged_tokens_total", Labels: "policy=default", Kind: mt.Counter, Value: 5},
		mt.Sample{Name: "dthrottle_policy_charges_total", Labels: "policy=llm", Kind: mt.Counter, Value: 2},
		mt.Sample{Name: "dthrottle_policy_charged_tokens_total", Labels: "policy=llm", Kind: mt.Counter, Value: 150},
		mt.Sample{Name: "dthrottle_queries_total", Labels: "result=ok", Kind: mt.Counter, Value: 1},
		mt.Sample{Name: "dthrottle_queries_total", Labels: "result=no", Kind: mt.Counter, Value: 1},
	)
}
