package bucket

import (
	"errors"
	"math"
	"testing"
	"time"
)

// quotaStep is one AllowQuota at a fixed instant and the verdict it must
// give.
type quotaStep struct {
	at      float64 // seconds after t0
	tag     string
	req     Request
	allowed bool
	tokens  float64
	wait    float64 // seconds
	full    float64 // seconds
	burst   int     // the burst the verdict's policy carries
}

func runQuota(t *testing.T, tb *Table, steps []quotaStep) {
	t.Helper()
	for i, s := range steps {
		v, err := tb.AllowQuota(at(s.at), []byte(s.tag), s.req)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		wait := v.Wait.Seconds()
		if v.Wait == math.MaxInt64 {
			wait = math.Inf(1)
		}
		if v.Allowed != s.allowed || math.Abs(v.Tokens-s.tokens) > 1e-6 ||
			math.Abs(wait-s.wait) > 1e-6 && !(math.IsInf(wait, 1) && math.IsInf(s.wait, 1)) ||
			math.Abs(v.Full.Seconds()-s.full) > 1e-6 || v.Policy.Burst != s.burst {
			t.Fatalf("step %d (t=%v %q hits %d): got allowed %v tokens %v wait %v full %v burst %d, want %v %v %v %v %d",
				i, s.at, s.tag, s.req.Hits, v.Allowed, v.Tokens, wait, v.Full.Seconds(), v.Policy.Burst,
				s.allowed, s.tokens, s.wait, s.full, s.burst)
		}
	}
}

// leaky3 is Gubernator's "limit 3, duration 60000" as a leaky bucket.
var leaky3 = Quota{Algorithm: Leaky, Burst: 3, Rate: 3.0 / 60}

func TestQuotaLeakySteps(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 100, Burst: 100}, 100)
	one := Request{Quota: leaky3, Hits: 1}
	read := Request{Quota: leaky3}
	runQuota(t, tb, []quotaStep{
		{at: 0, tag: "k", req: one, allowed: true, tokens: 2, full: 20, burst: 3},
		{at: 0, tag: "k", req: read, allowed: true, tokens: 2, full: 20, burst: 3},
		{at: 0, tag: "k", req: one, allowed: true, tokens: 1, full: 40, burst: 3},
		{at: 0, tag: "k", req: one, allowed: true, tokens: 0, wait: 20, full: 60, burst: 3},
		{at: 0, tag: "k", req: one, allowed: false, tokens: 0, wait: 20, full: 60, burst: 3},
		// Reading spends nothing, however often.
		{at: 1, tag: "k", req: read, allowed: false, tokens: 0.05, wait: 19, full: 59, burst: 3},
		{at: 1, tag: "k", req: read, allowed: false, tokens: 0.05, wait: 19, full: 59, burst: 3},
		// A read may ask about more than one token.
		{at: 1, tag: "k", req: Request{Quota: leaky3, Need: 2}, allowed: false, tokens: 0.05, wait: 39, full: 59, burst: 3},
		{at: 20, tag: "k", req: one, allowed: true, tokens: 0, wait: 20, full: 60, burst: 3},
		// Reset refills first.
		{at: 20, tag: "k", req: Request{Quota: leaky3, Hits: 1, Reset: true}, allowed: true, tokens: 2, full: 20, burst: 3},
	})
}

func TestQuotaWindowSteps(t *testing.T) {
	// t0 is 03:04:05: its minute's window ends 55 s later.
	tb := newTestTable(t, Policy{Rate: 100, Burst: 100}, 100)
	w := Quota{Algorithm: Window, Burst: 2, Period: time.Minute}
	one := Request{Quota: w, Hits: 1}
	runQuota(t, tb, []quotaStep{
		{at: 0, tag: "w", req: one, allowed: true, tokens: 1, full: 55, burst: 2},
		{at: 30, tag: "w", req: one, allowed: true, tokens: 0, wait: 25, full: 25, burst: 2},
		{at: 54, tag: "w", req: one, allowed: false, tokens: 0, wait: 1, full: 1, burst: 2},
		// The window ends: all back at once.
		{at: 55, tag: "w", req: one, allowed: true, tokens: 1, full: 60, burst: 2},
		{at: 56, tag: "w", req: Request{Quota: w}, allowed: true, tokens: 1, full: 59, burst: 2},
	})
}

func TestQuotaWindowSurvivesSweep(t *testing.T) {
	// An entry with hits in its window is not full, however long ago the
	// hits were (its tat is before now): the sweep must keep it. The
	// table has room for all, so only the sweep forgets.
	tb := newTestTable(t, Policy{Rate: 100, Burst: 100}, 1000)
	w := Quota{Algorithm: Window, Burst: 60, Period: time.Hour} // a token a minute of the window
	if v, _ := tb.AllowQuota(at(0), []byte("w"), Request{Quota: w, Hits: 2}); !v.Allowed {
		t.Fatal("first hits refused")
	}
	for i := range 200 {
		tb.Allow(at(10), []byte{'x', byte(i)})
	}
	tb.Drain(nil)        // an entry with hits to report is never forgotten
	for i := range 200 { // inserts sweep the entries
		tb.Allow(at(20), []byte{'y', byte(i)})
	}
	if _, err := tb.Peek(at(300), "x\x00"); err == nil {
		t.Fatal("the sweep forgot nothing: the test tests nothing")
	}
	if v, _ := tb.AllowQuota(at(300), []byte("w"), Request{Quota: w}); v.Tokens != 58 {
		t.Fatalf("the window holds %v tokens, want 58: the sweep forgot its hits", v.Tokens)
	}
}

func TestQuotaChangesAtOnce(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 100, Burst: 100}, 100)
	ten := Quota{Algorithm: Leaky, Burst: 10, Rate: 1}
	for range 5 {
		tb.AllowQuota(at(0), []byte("k"), Request{Quota: ten, Hits: 1})
	}
	// Reading under another limit changes nothing.
	if v, _ := tb.AllowQuota(at(0), []byte("k"), Request{Quota: Quota{Algorithm: Leaky, Burst: 4, Rate: 1}}); v.Allowed || v.Policy.Burst != 4 || v.Tokens != -1 {
		t.Fatalf("a read under burst 4: got %+v, want -1 tokens, refused", v)
	}
	if v, _ := tb.AllowQuota(at(0), []byte("k"), Request{Quota: ten}); !v.Allowed || v.Tokens != 5 {
		t.Fatalf("the read changed the limit: %+v, want 5 tokens under burst 10", v)
	}
	// The same tag with a burst of 4: the 5 spent leave it empty.
	v, _ := tb.AllowQuota(at(0), []byte("k"), Request{Quota: Quota{Algorithm: Leaky, Burst: 4, Rate: 1}, Hits: 1})
	if v.Allowed || v.Policy.Burst != 4 {
		t.Fatalf("lower limit: got %+v, want refused under burst 4", v)
	}
	// A plain query of the tag applies the limit it now has.
	if tb.Allow(at(0), []byte("k")) {
		t.Fatal("a line query served a tag its stated limit refuses")
	}
	if v := tb.AllowN(at(0), []byte("k"), 1); v.Allowed || v.Policy.Burst != 4 {
		t.Fatalf("AllowN: got %+v, want refused under burst 4", v)
	}
	if v := tb.Check(at(0), []byte("k"), 1); v.Allowed || v.Policy.Burst != 4 {
		t.Fatalf("Check: got %+v, want refused under burst 4", v)
	}
}

func TestQuotaRules(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 100, Burst: 100}, 100,
		Policy{Name: "fixed", Prefix: "f:", Rate: 1, Burst: 5, Quotas: QuotaNone},
		Policy{Name: "capped", Prefix: "c:", Rate: 1, Burst: 5, Quotas: QuotaLower},
		Policy{Name: "open", Prefix: "o:", Action: Allow})
	big := Request{Quota: Quota{Algorithm: Leaky, Burst: 50, Rate: 10}, Hits: 1}
	if _, err := tb.AllowQuota(at(0), []byte("f:1"), big); !errors.Is(err, ErrLimitForbidden) {
		t.Fatalf("QuotaNone: got %v, want ErrLimitForbidden", err)
	}
	v, err := tb.AllowQuota(at(0), []byte("c:1"), big)
	if err != nil || v.Policy.Burst != 5 || v.Policy.Rate != 1 || v.Policy.Name != "capped" {
		t.Fatalf("QuotaLower: got %+v %v, want burst 5 rate 1 under capped", v.Policy, err)
	}
	small := Request{Quota: Quota{Algorithm: Leaky, Burst: 2, Rate: 0.5}, Hits: 1}
	if v, _ := tb.AllowQuota(at(0), []byte("c:2"), small); v.Policy.Burst != 2 || v.Policy.Rate != 0.5 {
		t.Fatalf("QuotaLower keeps a lower limit: got %+v", v.Policy)
	}
	if v, err := tb.AllowQuota(at(0), []byte("o:1"), big); err != nil || !v.Allowed {
		t.Fatalf("allow policy: got %+v %v", v, err)
	}
	var le *LimitError
	if _, err := tb.AllowQuota(at(0), []byte("k"), Request{Quota: Quota{Algorithm: Leaky, Burst: 0, Rate: 1}, Hits: 1}); !errors.As(err, &le) || le.Field != "burst" {
		t.Fatalf("burst 0: got %v, want a LimitError on burst", err)
	}
	if _, err := tb.AllowQuota(at(0), []byte("k"), Request{Quota: Quota{Algorithm: Window, Burst: 1, Period: time.Microsecond}, Hits: 1}); !errors.As(err, &le) || le.Field != "period" {
		t.Fatalf("period 1us: got %v, want a LimitError on period", err)
	}
}

func TestQuotaDrain(t *testing.T) {
	tb := newTestTable(t, Policy{Rate: 100, Burst: 100}, 100)
	q := Quota{Algorithm: Leaky, Burst: 10, Rate: 1}
	tb.AllowQuota(at(0), []byte("k"), Request{Quota: q, Hits: 4})
	// 6 left: a query of 8 is refused, and with Drain takes the 6.
	v, _ := tb.AllowQuota(at(0), []byte("k"), Request{Quota: q, Hits: 8, Drain: true})
	if v.Allowed || v.Tokens != 0 {
		t.Fatalf("drain: got %+v, want refused with 0 tokens", v)
	}
	hits := tb.Drain(nil)
	if len(hits) != 1 || hits[0].Count != 10 || hits[0].Quota != q {
		t.Fatalf("drained hits: got %+v, want 10 under the stated limit", hits)
	}
	// More than the burst is never served; with Drain it still empties
	// the bucket, a new tag's too.
	tb.AllowQuota(at(10), []byte("k"), Request{Quota: q, Hits: 11, Drain: true})
	tb.AllowQuota(at(10), []byte("new"), Request{Quota: q, Hits: 11, Drain: true})
	for _, tag := range []string{"k", "new"} {
		if v, _ := tb.AllowQuota(at(10), []byte(tag), Request{Quota: q}); v.Tokens != 0 {
			t.Fatalf("%s after draining more than the burst: %v tokens, want 0", tag, v.Tokens)
		}
	}
}

// TestQuotaAcrossPeers: a peer that receives the hits applies them under
// the limit they were served under, and keeps that limit for the tag.
func TestQuotaAcrossPeers(t *testing.T) {
	a := newTestTable(t, Policy{Rate: 100, Burst: 100}, 100)
	b := newTestTable(t, Policy{Rate: 100, Burst: 100}, 100)
	q := Request{Quota: leaky3, Hits: 1}
	for range 3 {
		if v, _ := a.AllowQuota(at(0), []byte("k"), q); !v.Allowed {
			t.Fatal("a refused within the limit")
		}
	}
	b.SpendBatch(at(0.1), a.Drain(nil))
	if b.Allow(at(0.1), []byte("k")) {
		t.Fatal("b served a plain query past the stated limit its peer reported")
	}
	if v, _ := b.AllowQuota(at(0.1), []byte("k"), q); v.Allowed {
		t.Fatal("b served past the stated limit after its peer's report")
	}
	// Export and merge carry the limit too (warm start, state file).
	var levels []Level
	a.Export(at(1), func(l []Level) error {
		for _, lv := range l {
			lv.Key = append([]byte(nil), lv.Key...)
			levels = append(levels, lv)
		}
		return nil
	})
	if len(levels) != 1 || levels[0].Quota != leaky3 {
		t.Fatalf("export: got %+v, want one level under the stated limit", levels)
	}
	c := newTestTable(t, Policy{Rate: 100, Burst: 100}, 100)
	if c.Merge(at(1), 0, levels) != 1 {
		t.Fatal("merge lowered nothing")
	}
	if v, _ := c.AllowQuota(at(1), []byte("k"), q); v.Allowed || v.Policy.Burst != 3 {
		t.Fatalf("merged: got %+v, want refused under burst 3", v)
	}
}

// TestQuotaRegistryBounded: however many distinct limits callers state,
// the table holds MaxQuotas, refuses more while they are in use, and
// takes back the slots no tag uses any more.
func TestQuotaRegistryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("states MaxQuotas limits")
	}
	tb := newTestTable(t, Policy{Rate: 100, Burst: 100}, 1<<16)
	key := []byte("k-00000")
	for i := range MaxQuotas {
		key[2], key[3], key[4] = byte('a'+i%26), byte('a'+i/26%26), byte('a'+i/676%26)
		if _, err := tb.AllowQuota(at(0), key, Request{Quota: Quota{Algorithm: Leaky, Burst: 1 + i, Rate: 1}, Hits: 1}); err != nil {
			t.Fatalf("limit %d: %v", i, err)
		}
	}
	more := Request{Quota: Quota{Algorithm: Leaky, Burst: MaxQuotas + 1, Rate: 1}, Hits: 1}
	if _, err := tb.AllowQuota(at(0), []byte("more"), more); !errors.Is(err, ErrTooManyLimits) {
		t.Fatalf("one limit more while all are in use: got %v, want ErrTooManyLimits", err)
	}
	if st := tb.QuotaStats(); st.InUse != MaxQuotas || st.Refused != 1 {
		t.Fatalf("stats: %+v", st)
	}
	// Two hours on, every bucket is full and the sweep forgets them as
	// new tags arrive; then the slots are taken back.
	for i := range 4096 {
		tb.Allow(at(7200), []byte{'n', byte(i), byte(i >> 8)})
	}
	var taken error
	for i := range MaxQuotas { // idle tags still tracked keep their limits in use
		key[2], key[3], key[4] = byte('a'+i%26), byte('a'+i/26%26), byte('a'+i/676%26)
		tb.Forget(string(key))
	}
	_, taken = tb.AllowQuota(at(7200), []byte("more"), more)
	if taken != nil {
		t.Fatalf("after the tags were forgotten: %v", taken)
	}
	if st := tb.QuotaStats(); st.Reclaimed != MaxQuotas || st.InUse != 1 {
		t.Fatalf("stats after reclaiming: %+v", st)
	}
}

func TestCalendarStart(t *testing.T) {
	ts := time.Date(2026, 11, 28, 18, 47, 31, 5, time.UTC) // a Saturday
	for _, c := range []struct {
		u          Calendar
		start, end time.Time
	}{
		{Minute, time.Date(2026, 11, 28, 18, 47, 0, 0, time.UTC), time.Date(2026, 11, 28, 18, 48, 0, 0, time.UTC)},
		{Hour, time.Date(2026, 11, 28, 18, 0, 0, 0, time.UTC), time.Date(2026, 11, 28, 19, 0, 0, 0, time.UTC)},
		{Day, time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)},
		{Week, time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)},
		{Month, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{Year, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		s := calendarStart(ts.UnixNano(), c.u)
		if s != c.start.UnixNano() {
			t.Errorf("unit %d: start %v, want %v", c.u, time.Unix(0, s).UTC(), c.start)
		}
		if n := calendarNext(s, c.u); n != c.end.UnixNano() {
			t.Errorf("unit %d: next %v, want %v", c.u, time.Unix(0, n).UTC(), c.end)
		}
	}
	// A month's window holds its hits to the end of a 31-day month.
	tb := newTestTable(t, Policy{Rate: 100, Burst: 100}, 100)
	m := Request{Quota: Quota{Algorithm: Window, Burst: 2, Calendar: Month}, Hits: 1}
	jan := time.Date(2026, 1, 3, 0, 0, 0, 0, time.UTC)
	tb.AllowQuota(jan, []byte("m"), m)
	tb.AllowQuota(jan, []byte("m"), m)
	if v, _ := tb.AllowQuota(jan.AddDate(0, 0, 27), []byte("m"), m); v.Allowed {
		t.Fatal("served a third hit within January")
	}
	if v, _ := tb.AllowQuota(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), []byte("m"), m); !v.Allowed {
		t.Fatal("February's window refused its first hit")
	}
}
