package main

import (
	"testing"
	"time"
)

func ms(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, m := range v {
		out[i] = time.Duration(m) * time.Millisecond
	}
	return out
}

func TestExactServed(t *testing.T) {
	for _, c := range []struct {
		name  string
		times []time.Duration
		rate  float64
		burst int
		want  int
	}{
		{"burst only", ms(0, 0, 0), 1, 2, 2},
		{"one token earned", ms(0, 0, 0, 1000), 1, 2, 3},
		{"a token short", ms(0, 0, 500, 999), 1, 2, 2},
		{"a token exactly", ms(0, 0, 500, 999, 1000), 1, 2, 3},
		{"refill capped at burst", ms(0, 0, 10000, 10000, 10000), 1, 2, 4},
		{"never empty", ms(0, 100, 200, 300), 10, 1, 4},
		{"start late", ms(5000, 5000, 5000), 1, 2, 2},
		{"no bucket", ms(0), 0, 2, 0},
	} {
		if got := exactServed(c.times, c.rate, c.burst); got != c.want {
			t.Errorf("%s: got %d want %d", c.name, got, c.want)
		}
	}
}

// TestExactServedTenTimes is the accuracy run's own shape: rate 100/s,
// burst 100, offered 1,000/s for 10 s. The bucket serves 111 in its
// first 110 ms (the burst, and 11 tokens earned meanwhile), then one
// every 10 ms from 120 ms to 9,990 ms: 988 more.
func TestExactServedTenTimes(t *testing.T) {
	times := make([]time.Duration, 10000)
	for k := range times {
		times[k] = time.Duration(k) * time.Millisecond
	}
	if got, want := exactServed(times, 100, 100), 111+988; got != want {
		t.Fatalf("got %d want %d", got, want)
	}
	if got, want := exactBound(10*time.Second, 100, 100), 1100.0; got != want {
		t.Fatalf("bound: got %v want %v", got, want)
	}
}

func TestQuantile(t *testing.T) {
	d := ms(5, 1, 4, 2, 3, 10, 9, 8, 7, 6)
	if got := quantile(d, 0.5); got != 5*time.Millisecond {
		t.Errorf("p50: got %v", got)
	}
	if got := quantile(d, 0.99); got != 10*time.Millisecond {
		t.Errorf("p99: got %v", got)
	}
	if got := quantile(nil, 0.5); got != 0 {
		t.Errorf("empty: got %v", got)
	}
}
