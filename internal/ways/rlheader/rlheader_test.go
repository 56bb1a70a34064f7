package rlheader

import (
	"math"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

func TestAppendPolicy(t *testing.T) {
	for _, tc := range []struct {
		p    bucket.Policy
		want string
	}{
		{bucket.Policy{Name: "default", Rate: 0.5, Burst: 3}, `"default";q=3;w=6`},
		{bucket.Policy{Name: "upload", Rate: 0.05, Burst: 3}, `"upload";q=3;w=60`},
		{bucket.Policy{Name: "fast", Rate: 1000, Burst: 10}, `"fast";q=10;w=1`}, // 10 ms, at least 1 s
		{bucket.Policy{Name: "third", Rate: 3, Burst: 10}, `"third";q=10;w=4`},  // 3.33 s, rounded up
		{bucket.Policy{Name: `a"b\c`, Rate: 1, Burst: 1}, `"a\"b\\c";q=1;w=1`},
		{bucket.Policy{Name: "é\n", Rate: 1, Burst: 1}, `"???";q=1;w=1`},
	} {
		if got := string(AppendPolicy(nil, tc.p)); got != tc.want {
			t.Errorf("AppendPolicy(%+v) = %s, want %s", tc.p, got, tc.want)
		}
	}
}

func TestAppendRateLimit(t *testing.T) {
	p := bucket.Policy{Name: "p", Rate: 1, Burst: 5}
	for _, tc := range []struct {
		v    bucket.Verdict
		want string
	}{
		{bucket.Verdict{Policy: p, Tokens: 5}, `"p";r=5;t=0`},
		{bucket.Verdict{Policy: p, Tokens: 2.9, Full: 2100 * time.Millisecond}, `"p";r=2;t=3`},
		{bucket.Verdict{Policy: p, Tokens: -3, Full: 8 * time.Second}, `"p";r=0;t=8`},
	} {
		if got := string(AppendRateLimit(nil, tc.v)); got != tc.want {
			t.Errorf("AppendRateLimit(%+v) = %s, want %s", tc.v, got, tc.want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		v    bucket.Verdict
		want int64
		ok   bool
	}{
		{bucket.Verdict{Allowed: true}, 0, false},
		{bucket.Verdict{Wait: math.MaxInt64}, 0, false}, // a cost above the burst
		{bucket.Verdict{Wait: 0}, 1, true},
		{bucket.Verdict{Wait: 1500 * time.Millisecond}, 2, true},
		{bucket.Verdict{Wait: 20 * time.Second}, 20, true},
	} {
		if got, ok := RetryAfter(tc.v); got != tc.want || ok != tc.ok {
			t.Errorf("RetryAfter(wait %v, allowed %v) = %d, %v; want %d, %v", tc.v.Wait, tc.v.Allowed, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCeilSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{-time.Second: 0, 0: 0, 1: 1, time.Second: 1, time.Second + 1: 2, time.Minute: 60} {
		if got := CeilSeconds(d); got != want {
			t.Errorf("CeilSeconds(%v) = %d, want %d", d, got, want)
		}
	}
}
