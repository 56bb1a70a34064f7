package rls

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

func TestLimitUnit(t *testing.T) {
	const (
		sec  = rlsv3.RateLimitResponse_RateLimit_SECOND
		min  = rlsv3.RateLimitResponse_RateLimit_MINUTE
		hour = rlsv3.RateLimitResponse_RateLimit_HOUR
		day  = rlsv3.RateLimitResponse_RateLimit_DAY
	)
	for _, tc := range []struct {
		rate float64
		n    uint32
		unit rlsv3.RateLimitResponse_RateLimit_Unit
		days uint32
	}{
		{1, 1, sec, 1},
		{100, 100, sec, 1},
		{1e9, 1e9, sec, 1},
		{0.5, 30, min, 1},
		{0.05, 3, min, 1},
		{1.0 / 60, 1, min, 1},
		{0.016666666666666666, 1, min, 1},
		{1.0 / 3, 20, min, 1},
		{0.3333, 1200, hour, 1}, // 19.998 a minute, 1199.88 an hour: rounded where it is at least 50
		{0.3, 18, min, 1},
		{2.5, 150, min, 1},
		{1.5, 90, min, 1},
		{0.123456, 444, hour, 1}, // 7.4 a minute, 444.44 an hour
		{1.0 / 3600, 1, hour, 1},
		{1.0 / 86400, 1, day, 1},
		{10.5 / 86400, 21, day, 2},
		{1e-6, 50, day, 579},
		{7.0 / 86400 / 10, 7, day, 10},
	} {
		n, unit, days := limitUnit(tc.rate)
		if n != tc.n || unit != tc.unit || days != tc.days {
			t.Errorf("limitUnit(%v) = %d per %d %v, want %d per %d %v", tc.rate, n, days, unit, tc.n, tc.days, tc.unit)
		}
	}
}
