package rls

import (
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// TestCharge: a descriptor holding the charge entry charges the tag of
// its other entries its cost, whatever the bucket holds, and is answered
// OK with no limit, as Envoy's apply_on_stream_done sends it after the
// response; the next requests for the tag are refused until the debt has
// refilled.
func TestCharge(t *testing.T) {
	clk := newClock()
	tb := newTable(t, bucket.Policy{Rate: 1, Burst: 10})
	s, addr := startServer(t, tb, Config{Clock: clk.Now, ChargeKey: DefaultChargeKey})
	c := dial(t, addr)
	if r := c.ask("api", desc("user=alice")); codesOf(r) != "OK: OK" {
		t.Fatalf("before the charge: %s", codesOf(r))
	}
	r := c.ask("api", hits(desc("user=alice", "dthrottle_charge=tokens"), 15))
	if codesOf(r) != "OK: OK" || r.GetStatuses()[0].GetCurrentLimit() != nil || len(r.GetResponseHeadersToAdd()) != 0 {
		t.Fatalf("the charge: %v", r)
	}
	st, _ := tb.Peek(clk.Now(), "rls:api|user=alice")
	if st.Tokens != -6 || st.Unreported != 16 {
		t.Fatalf("after a charge of 15: %+v, want -6 tokens and 16 hits to report", st)
	}
	r = c.ask("api", desc("user=alice"))
	if codesOf(r) != "OVER_LIMIT: OVER_LIMIT" || header(r, "Retry-After") != "7" {
		t.Fatalf("after the charge: %s, Retry-After %q, want 7", codesOf(r), header(r, "Retry-After"))
	}
	clk.Add(7 * time.Second)
	if r := c.ask("api", desc("user=alice")); codesOf(r) != "OK: OK" {
		t.Fatalf("7 s later: %s", codesOf(r))
	}

	// The request's hits_addend, 0 (nothing), 2^32-1 (into deep debt).
	charge := func(hitsAddend uint32, user string) {
		t.Helper()
		r, err := c.call(&rlsv3.RateLimitRequest{Domain: "api", HitsAddend: hitsAddend,
			Descriptors: []*rlcommon.RateLimitDescriptor{desc("dthrottle_charge=", "user="+user)}})
		if err != nil || codesOf(r) != "OK: OK" {
			t.Fatalf("charging %d to %s: %v %v", hitsAddend, user, r, err)
		}
	}
	charge(3, "bob")
	if st, _ := tb.Peek(clk.Now(), "rls:api|user=bob"); st.Tokens != 7 {
		t.Errorf("bob after a charge of 3: %v tokens, want 7", st.Tokens)
	}
	charge(1<<32-1, "carol")
	if st, _ := tb.Peek(clk.Now(), "rls:api|user=carol"); st.Tokens > -1e9 || st.Unreported != 1<<32-1 {
		t.Errorf("carol after a charge of 2^32-1: %+v", st)
	}
	if r, err := c.call(&rlsv3.RateLimitRequest{Domain: "api",
		Descriptors: []*rlcommon.RateLimitDescriptor{hits(desc("user=dave", "dthrottle_charge=x"), 0)}}); err != nil || codesOf(r) != "OK: OK" {
		t.Fatalf("a charge of 0: %v %v", r, err)
	}
	if st, err := tb.Peek(clk.Now(), "rls:api|user=dave"); err == nil {
		t.Errorf("a charge of 0 made a bucket: %+v", st)
	}
	// A descriptor's hits_addend over 2^32-1 charges 2^32-1.
	c.ask("api", hits(desc("user=erin", "dthrottle_charge=x"), 1<<40))
	if st, _ := tb.Peek(clk.Now(), "rls:api|user=erin"); st.Unreported != 1<<32-1 {
		t.Errorf("erin after a charge of 2^40: %+v, want 2^32-1 hits", st)
	}
	if st := s.Stats(); st.Charges != 5 || st.OK != 7 || st.OverLimit != 1 {
		t.Errorf("stats %+v, want 5 charges, 7 requests answered OK and 1 OVER_LIMIT", st)
	}
}

// TestChargeBesideRefusal: a charge is applied whatever the request's
// other descriptors decide.
func TestChargeBesideRefusal(t *testing.T) {
	clk := newClock()
	tb := newTable(t, bucket.Policy{Rate: 1, Burst: 1})
	_, addr := startServer(t, tb, Config{Clock: clk.Now, ChargeKey: DefaultChargeKey})
	c := dial(t, addr)
	c.ask("api", desc("k=full"))
	r := c.ask("api", desc("k=full"), hits(desc("k=paid", "dthrottle_charge=1"), 2))
	if codesOf(r) != "OVER_LIMIT: OVER_LIMIT OK" {
		t.Fatalf("%s", codesOf(r))
	}
	if st, _ := tb.Peek(clk.Now(), "rls:api|k=paid"); st.Tokens != -1 {
		t.Errorf("k=paid holds %v tokens, want -1", st.Tokens)
	}
}

// TestChargeKeyOff: with no charge key, or another one, the entry is an
// entry like any other, part of the tag; a charge under an unmatched
// descriptor answered OK with no limit charges nothing.
func TestChargeKeyOff(t *testing.T) {
	clk := newClock()
	tb := newTable(t, bucket.Policy{Rate: 1, Burst: 5}, bucket.Policy{Name: "u", Prefix: "rls:api|user=", Rate: 1, Burst: 5})
	s, addr := startServer(t, tb, Config{Clock: clk.Now})
	c := dial(t, addr)
	r := c.ask("api", hits(desc("user=a", "dthrottle_charge=1"), 3))
	if codesOf(r) != "OK: OK" || r.GetStatuses()[0].GetLimitRemaining() != 2 {
		t.Fatalf("no charge key: %v", r)
	}
	if _, err := tb.Peek(clk.Now(), "rls:api|user=a|dthrottle_charge=1"); err != nil {
		t.Errorf("no charge key: the entry is not in the tag: %v", err)
	}
	s.SetOptions(true, "cost")
	c.ask("api", hits(desc("user=b", "cost=1"), 3))
	if st, _ := tb.Peek(clk.Now(), "rls:api|user=b"); st.Tokens != 2 {
		t.Errorf("charge key cost: user=b holds %v tokens, want 2", st.Tokens)
	}
	c.ask("other", hits(desc("user=b", "cost=1"), 3))
	if st, err := tb.Peek(clk.Now(), "rls:other|user=b"); err == nil {
		t.Errorf("an unmatched charge under unmatched = ok was charged: %+v", st)
	}
}
