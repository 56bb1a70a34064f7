package bucket

import (
	"testing"
	"time"
)

// TestViewStatedLimits: once the daemon has given a tag a limit its
// callers stated, a View decides the tag under that limit in process,
// exactly as the daemon would; a calendar window, and a slot taken
// back, are asked.
func TestViewStatedLimits(t *testing.T) {
	tb, v := sharedTable(t, Policy{Rate: 100, Burst: 100})
	leaky := Request{Quota: Quota{Algorithm: Leaky, Burst: 3, Rate: 0.05}, Hits: 1}
	if r, _ := tb.AllowQuota(at(0), []byte("k"), leaky); !r.Allowed {
		t.Fatal("the daemon refused the first hit")
	}
	d1 := v.Decide(ns(0), []byte("k"))
	d2 := v.Decide(ns(0), []byte("k"))
	if d1.Code != OK || d1.Limit != 3 || d1.Remaining != 1 || d2.Code != OK || d2.Remaining != 0 {
		t.Fatalf("in process: %+v then %+v, want OK with 1 then 0 left of 3", d1, d2)
	}
	d3 := v.Decide(ns(0), []byte("k"))
	if d3.Code != No || d3.RetryAfter != int64(20*time.Second) || d3.Reset != int64(60*time.Second) {
		t.Fatalf("third in process: %+v, want No, a token in 20 s, full in 60 s", d3)
	}
	if r, _ := tb.AllowQuota(at(0), []byte("k"), leaky); r.Allowed {
		t.Fatal("the daemon served what the view spent")
	}
	hits := tb.Drain(nil)
	if len(hits) != 1 || hits[0].Count != 3 || hits[0].Quota != leaky.Quota {
		t.Fatalf("drained %+v, want k=3 under its stated limit", hits)
	}

	// A window aligned to its length: t0 is 03:04:05, the minute ends
	// 55 s later.
	win := Request{Quota: Quota{Algorithm: Window, Burst: 2, Period: time.Minute}, Hits: 1}
	tb.AllowQuota(at(0), []byte("w"), win)
	if d := v.Decide(ns(1), []byte("w")); d.Code != OK || d.Remaining != 0 || d.Reset != int64(54*time.Second) {
		t.Fatalf("window in process: %+v, want OK, none left, back in 54 s", d)
	}
	tb.Beat(at(2))
	if d := v.Decide(ns(2), []byte("w")); d.Code != No || d.RetryAfter != int64(53*time.Second) {
		t.Fatalf("window spent: %+v, want No until the window ends in 53 s", d)
	}
	tb.Beat(at(55))
	if d := v.Decide(ns(55), []byte("w")); d.Code != OK {
		t.Fatalf("the next window: %+v, want OK", d)
	}

	// A calendar window is the daemon's to decide.
	cal := Request{Quota: Quota{Algorithm: Window, Burst: 2, Calendar: Day}, Hits: 1}
	tb.AllowQuota(at(55), []byte("c"), cal)
	if d := v.Decide(ns(55), []byte("c")); d.Code != Ask {
		t.Fatalf("calendar window in process: %+v, want Ask", d)
	}
	// An entry being written is asked.
	tb.reg.quotas[0] |= 1
	if d := v.Decide(ns(55), []byte("k")); d.Code != Ask {
		t.Fatalf("entry being written: %+v, want Ask", d)
	}
	tb.reg.quotas[0] &^= 1
}
