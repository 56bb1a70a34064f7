package rls

import (
	"slices"
	"strconv"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// upload is the policy of the descriptors generic_key=upload in domain
// api: 3 per minute, a burst of 3.
var upload = bucket.Policy{Name: "upload", Prefix: "rls:api|generic_key=upload", Rate: 0.05, Burst: 3}

// descStatus is one descriptor's status, as text and numbers.
type descStatus struct {
	code      string
	limit     string // "3 per MINUTE (upload)", "" for none
	remaining uint32
	reset     time.Duration
}

func statusOf(s *rlsv3.RateLimitResponse_DescriptorStatus) descStatus {
	st := descStatus{code: s.GetCode().String(), remaining: s.GetLimitRemaining()}
	if l := s.GetCurrentLimit(); l != nil {
		st.limit = itoa(l.GetRequestsPerUnit()) + " per " + l.GetUnit().String() + " (" + l.GetName() + ")"
		if m := l.GetUnitMultiplier(); m != nil {
			st.limit += " x" + itoa(m.GetValue())
		}
	}
	if d := s.GetDurationUntilReset(); d != nil {
		st.reset = d.AsDuration()
	}
	return st
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

// policyStats are the counts of the policy named name.
func policyStats(t *testing.T, tb *bucket.Table, name string) bucket.PolicyStats {
	t.Helper()
	for _, ps := range tb.PolicyStats() {
		if ps.Name == name {
			return ps
		}
	}
	t.Fatalf("no policy %q", name)
	return bucket.PolicyStats{}
}

// TestBurstThenOverLimit: three requests spend the burst, the fourth is
// over the limit; each answer states the limit, the tokens left, the time
// until the bucket is full, and the header fields the HTTP decision
// endpoint would send.
func TestBurstThenOverLimit(t *testing.T) {
	clk := newClock()
	_, addr := startServer(t, newTable(t, bucket.Policy{Rate: 1, Burst: 10}, upload), Config{Clock: clk.Now})
	c := dial(t, addr)
	for i, want := range []struct {
		code          string
		remaining     uint32
		reset         time.Duration
		ratelimit     string
		retryAfter    string
		overallStatus string
	}{
		{"OK", 2, 20 * time.Second, `"upload";r=2;t=20`, "", "OK"},
		{"OK", 1, 40 * time.Second, `"upload";r=1;t=40`, "", "OK"},
		{"OK", 0, 60 * time.Second, `"upload";r=0;t=60`, "", "OK"},
		{"OVER_LIMIT", 0, 60 * time.Second, `"upload";r=0;t=60`, "20", "OVER_LIMIT"},
	} {
		r := c.ask("api", desc("generic_key=upload"))
		if r.GetOverallCode().String() != want.overallStatus || len(r.GetStatuses()) != 1 {
			t.Fatalf("request %d: %s", i+1, codesOf(r))
		}
		got := statusOf(r.GetStatuses()[0])
		if w := (descStatus{want.code, "3 per MINUTE (upload)", want.remaining, want.reset}); got != w {
			t.Errorf("request %d: %+v, want %+v", i+1, got, w)
		}
		if h := header(r, "RateLimit-Policy"); h != `"upload";q=3;w=60` {
			t.Errorf("request %d: RateLimit-Policy %q", i+1, h)
		}
		if h := header(r, "RateLimit"); h != want.ratelimit {
			t.Errorf("request %d: RateLimit %q, want %q", i+1, h, want.ratelimit)
		}
		if h := header(r, "Retry-After"); h != want.retryAfter {
			t.Errorf("request %d: Retry-After %q, want %q", i+1, h, want.retryAfter)
		}
	}
	// 20 s later one token is back.
	clk.Add(20 * time.Second)
	if r := c.ask("api", desc("generic_key=upload")); codesOf(r) != "OK: OK" {
		t.Fatalf("20 s later: %s", codesOf(r))
	}
}

// TestHitsAddend: the request's hits_addend is every descriptor's cost
// unless the descriptor gives its own; 0 checks without spending; a cost
// above the burst is refused without spending, with no Retry-After.
func TestHitsAddend(t *testing.T) {
	clk := newClock()
	tb := newTable(t, bucket.Policy{Rate: 1, Burst: 10}, upload)
	_, addr := startServer(t, tb, Config{Clock: clk.Now})
	c := dial(t, addr)
	remaining := func(r *rlsv3.RateLimitResponse) []uint32 {
		var out []uint32
		for _, s := range r.GetStatuses() {
			out = append(out, s.GetLimitRemaining())
		}
		return out
	}
	ask := func(hitsAddend uint32, descs ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		r, err := c.call(&rlsv3.RateLimitRequest{Domain: "api", HitsAddend: hitsAddend, Descriptors: descs})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Request 2, descriptor a its own 3: a spends 3, b 2.
	r := ask(2, hits(desc("k=a"), 3), desc("k=b"))
	if codesOf(r) != "OK: OK OK" || !slices.Equal(remaining(r), []uint32{7, 8}) {
		t.Fatalf("hits 2 and 3: %s, remaining %v, want 7 and 8", codesOf(r), remaining(r))
	}
	// 0: a check, nothing spent, whatever the request's.
	r = ask(5, hits(desc("k=a"), 0))
	if codesOf(r) != "OK: OK" || !slices.Equal(remaining(r), []uint32{7}) {
		t.Fatalf("hits 0: %s, remaining %v, want 7", codesOf(r), remaining(r))
	}
	// Above the burst: refused, nothing spent, never served.
	for _, n := range []uint64{11, 1<<32 - 1, 1<<64 - 1} {
		r = ask(0, hits(desc("k=a"), n))
		if codesOf(r) != "OVER_LIMIT: OVER_LIMIT" || !slices.Equal(remaining(r), []uint32{7}) || header(r, "Retry-After") != "" {
			t.Fatalf("hits %d: %s, remaining %v, Retry-After %q", n, codesOf(r), remaining(r), header(r, "Retry-After"))
		}
	}
	r = ask(1<<32-1, desc("k=a"))
	if codesOf(r) != "OVER_LIMIT: OVER_LIMIT" || !slices.Equal(remaining(r), []uint32{7}) {
		t.Fatalf("request hits 2^32-1: %s, remaining %v", codesOf(r), remaining(r))
	}
	// Seven more, then a check says OVER_LIMIT, with the wait for one.
	if r = ask(7, desc("k=a")); codesOf(r) != "OK: OK" {
		t.Fatalf("hits 7: %s", codesOf(r))
	}
	r = ask(0, hits(desc("k=a"), 0))
	if codesOf(r) != "OVER_LIMIT: OVER_LIMIT" || header(r, "Retry-After") != "1" {
		t.Fatalf("a check of an empty bucket: %s, Retry-After %q", codesOf(r), header(r, "Retry-After"))
	}
	if st, _ := tb.Peek(clk.Now(), "rls:api|k=a"); st.Tokens != 0 {
		t.Fatalf("after the checks a holds %v tokens, want 0", st.Tokens)
	}
	// The refusals the table counted: the three costs above the burst
	// and the request's 2^32-1, not the checks.
	if ps := tb.PolicyStats(); ps[0].NO != 4 {
		t.Errorf("default policy counted %d refusals, want 4", ps[0].NO)
	}
}

// TestSeveralDescriptors: a request is served when every descriptor is;
// one refused descriptor spends none of the others' tokens, and the
// refusal is counted where it happened only.
func TestSeveralDescriptors(t *testing.T) {
	clk := newClock()
	tight := bucket.Policy{Name: "tight", Prefix: "rls:api|tight=", Rate: 1, Burst: 1}
	tb := newTable(t, bucket.Policy{Rate: 1, Burst: 5}, tight)
	s, addr := startServer(t, tb, Config{Clock: clk.Now})
	c := dial(t, addr)
	r := c.ask("api", desc("tight=x"), desc("wide=x"))
	if codesOf(r) != "OK: OK OK" {
		t.Fatalf("first: %s", codesOf(r))
	}
	if h := header(r, "RateLimit-Policy"); h != `"tight";q=1;w=1, "default";q=5;w=5` {
		t.Errorf("RateLimit-Policy %q", h)
	}
	if h := header(r, "RateLimit"); h != `"tight";r=0;t=1, "default";r=4;t=1` {
		t.Errorf("RateLimit %q", h)
	}
	r = c.ask("api", desc("tight=x"), desc("wide=x"))
	if codesOf(r) != "OVER_LIMIT: OVER_LIMIT OK" || header(r, "Retry-After") != "1" {
		t.Fatalf("second: %s, Retry-After %q", codesOf(r), header(r, "Retry-After"))
	}
	if got := statusOf(r.GetStatuses()[1]); got.remaining != 4 {
		t.Errorf("second: wide=x %+v, want 4 left: nothing spent", got)
	}
	if st, _ := tb.Peek(clk.Now(), "rls:api|wide=x"); st.Tokens != 4 {
		t.Errorf("wide=x holds %v tokens after the refused request, want 4", st.Tokens)
	}
	if def, tight := policyStats(t, tb, "default"), policyStats(t, tb, "tight"); def.OK != 1 || def.NO != 0 || tight.OK != 1 || tight.NO != 1 {
		t.Errorf("policy counts: default %+v, tight %+v; want default 1 served, tight 1 served and 1 refused", def, tight)
	}
	if st := s.Stats(); st.OK != 1 || st.OverLimit != 1 || st.DescriptorsOK != 3 || st.DescriptorsOverLimit != 1 {
		t.Errorf("stats %+v", st)
	}
}

// racing is a table on which another client spends a tag's bucket
// between the check and the spend.
type racing struct {
	*bucket.Table
	tag string
}

func (r racing) AllowN(now time.Time, tag []byte, n int) bucket.Verdict {
	if string(tag) == r.tag {
		r.Table.AllowN(now, tag, 1) // the other client
	}
	return r.Table.AllowN(now, tag, n)
}

// TestSpendRace: a bucket spent between the check and the spend refuses
// the request; the descriptors before it stay spent, those after it are
// neither spent nor counted.
func TestSpendRace(t *testing.T) {
	clk := newClock()
	tb := newTable(t, bucket.Policy{Rate: 1, Burst: 1})
	_, addr := startServer(t, racing{tb, "rls:api|k=b"}, Config{Clock: clk.Now})
	c := dial(t, addr)
	r := c.ask("api", desc("k=a"), desc("k=b"), desc("k=c"))
	if codesOf(r) != "OVER_LIMIT: OK OVER_LIMIT OK" {
		t.Fatalf("%s, want OVER_LIMIT: OK OVER_LIMIT OK", codesOf(r))
	}
	for tag, want := range map[string]float64{"rls:api|k=a": 0, "rls:api|k=b": 0, "rls:api|k=c": 1} {
		if st, _ := tb.Peek(clk.Now(), tag); st.Tokens != want {
			t.Errorf("%s holds %v tokens, want %v", tag, st.Tokens, want)
		}
	}
	if ps := tb.PolicyStats(); ps[0].OK != 2 || ps[0].NO != 1 {
		t.Errorf("counted %d served and %d refused, want 2 (a and the other client) and 1 (b)", ps[0].OK, ps[0].NO)
	}
}

// TestUnmatched: a descriptor no prefix policy matches is under the
// default policy, or, with UnmatchedOK, OK with no limit and no bucket;
// SetOptions changes it live.
func TestUnmatched(t *testing.T) {
	clk := newClock()
	tb := newTable(t, bucket.Policy{Rate: 1, Burst: 1}, upload)
	s, addr := startServer(t, tb, Config{Clock: clk.Now})
	c := dial(t, addr)
	r := c.ask("api", desc("generic_key=download"))
	if got := statusOf(r.GetStatuses()[0]); got.limit != "1 per SECOND (default)" {
		t.Fatalf("under the default: %+v", got)
	}
	if r = c.ask("api", desc("generic_key=download")); codesOf(r) != "OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("the default's burst spent: %s", codesOf(r))
	}
	s.SetOptions(true, DefaultChargeKey)
	tags := tb.Stats().Tags
	for range 3 {
		r = c.ask("other", desc("generic_key=download"), desc("generic_key=x"))
		if codesOf(r) != "OK: OK OK" || r.GetStatuses()[0].GetCurrentLimit() != nil || len(r.GetResponseHeadersToAdd()) != 0 {
			t.Fatalf("unmatched OK: %v", r)
		}
	}
	if got := tb.Stats().Tags; got != tags {
		t.Errorf("unmatched OK made %d tags, want none", got-tags)
	}
	// A matched descriptor beside it is limited as before.
	r = c.ask("api", desc("generic_key=upload"), desc("generic_key=download"))
	if codesOf(r) != "OK: OK OK" || r.GetStatuses()[0].GetCurrentLimit() == nil || r.GetStatuses()[1].GetCurrentLimit() != nil {
		t.Fatalf("matched and unmatched: %v", r)
	}
}

// TestFixedPolicies: an allow policy's descriptor is OK and a deny
// policy's OVER_LIMIT, neither with a limit, nor headers, nor a
// Retry-After (a denied request is never served).
func TestFixedPolicies(t *testing.T) {
	tb := newTable(t, bucket.Policy{Rate: 1, Burst: 5},
		bucket.Policy{Name: "free", Prefix: "rls:api|k=free", Action: bucket.Allow},
		bucket.Policy{Name: "banned", Prefix: "rls:api|k=banned", Action: bucket.Deny})
	_, addr := startServer(t, tb, Config{})
	c := dial(t, addr)
	r := c.ask("api", desc("k=free"))
	if codesOf(r) != "OK: OK" || r.GetStatuses()[0].GetCurrentLimit() != nil || len(r.GetResponseHeadersToAdd()) != 0 {
		t.Fatalf("allow: %v", r)
	}
	r = c.ask("api", desc("k=banned"), desc("k=other"))
	if codesOf(r) != "OVER_LIMIT: OVER_LIMIT OK" || r.GetStatuses()[0].GetCurrentLimit() != nil || header(r, "Retry-After") != "" {
		t.Fatalf("deny: %v", r)
	}
	if names := headerNames(r.GetResponseHeadersToAdd()); !slices.Equal(names, []string{"RateLimit-Policy", "RateLimit"}) {
		t.Errorf("deny beside a limit: headers %v, want the limit's", names)
	}
	if free, banned, def := policyStats(t, tb, "free"), policyStats(t, tb, "banned"), policyStats(t, tb, "default"); free.OK != 1 || banned.NO != 1 || def.OK != 0 {
		t.Errorf("policy counts: free %+v, banned %+v, default %+v", free, banned, def)
	}
}

// TestDryRun: a dry-run policy serves what its limit refuses, spends as
// if limiting, and says so in DThrottle-Dry-Run.
func TestDryRun(t *testing.T) {
	tb := newTable(t, bucket.Policy{Rate: 1, Burst: 1, DryRun: true})
	_, addr := startServer(t, tb, Config{Clock: newClock().Now})
	c := dial(t, addr)
	for i, want := range []string{"served", "refused"} {
		r := c.ask("api", desc("k=v"))
		if codesOf(r) != "OK: OK" || header(r, "DThrottle-Dry-Run") != want || header(r, "Retry-After") != "" {
			t.Fatalf("request %d: %s, DThrottle-Dry-Run %q, want %q", i+1, codesOf(r), header(r, "DThrottle-Dry-Run"), want)
		}
	}
	if ps := tb.PolicyStats(); ps[0].DryRunRefused != 1 {
		t.Errorf("dry runs refused: %d, want 1", ps[0].DryRunRefused)
	}
}
