package gubernator

import (
	"context"
	"testing"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
	"google.golang.org/protobuf/proto"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// The service on the real table, on a clock moved by hand: what each
// algorithm and behaviour answers, step by step.

// step is one rate limit asked at t0+at, and its answer.
type step struct {
	at        time.Duration
	r         *guber.RateLimitReq
	status    guber.Status
	remaining int64
	reset     time.Duration // reset_time - t0, in ms precision
}

func runSteps(t *testing.T, steps []step) {
	t.Helper()
	tb, err := bucket.New(bucket.Config{Default: bucket.Policy{Rate: 0.001, Burst: 1000}, MaxTags: 1000, MaxTagBytes: 256})
	if err != nil {
		t.Fatal(err)
	}
	var now time.Time
	s := New(tb, Config{Clock: func() time.Time { return now }})
	for i, st := range steps {
		now = t0.Add(st.at)
		resp, err := s.svc.GetRateLimits(context.Background(), &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{st.r}})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		got := resp.Responses[0]
		if got.Error != "" || got.Status != st.status || got.Remaining != st.remaining || got.ResetTime != t0.Add(st.reset).UnixMilli() {
			t.Errorf("step %d: got %v remaining %d reset %+dms error %q; want %v remaining %d reset %+dms", i,
				got.Status, got.Remaining, got.ResetTime-t0.UnixMilli(), got.Error, st.status, st.remaining, st.reset.Milliseconds())
		}
	}
}

// with returns a copy of r with hits and behavior set.
func with(r *guber.RateLimitReq, hits int64, b guber.Behavior) *guber.RateLimitReq {
	c := proto.Clone(r).(*guber.RateLimitReq)
	c.Hits, c.Behavior = hits, b
	return c
}

func TestTokenBucketOnTheTable(t *testing.T) {
	// 3 a minute; t0 is 30.25 s into its minute, so the window ends at
	// +29.75 s, where Gubernator's would end at +60 s.
	r := &guber.RateLimitReq{Name: "n", UniqueKey: "k", Limit: 3, Duration: 60000}
	end := 29750 * time.Millisecond
	under, over := guber.Status_UNDER_LIMIT, guber.Status_OVER_LIMIT
	runSteps(t, []step{
		{0, with(r, 0, 0), under, 3, 0}, // untouched: full now
		{0, with(r, 1, 0), under, 2, end},
		{time.Second, with(r, 0, 0), under, 2, end},
		{time.Second, with(r, 2, 0), under, 0, end},
		{2 * time.Second, with(r, 1, 0), over, 0, end},
		{2 * time.Second, with(r, 0, 0), over, 0, end},
		{3 * time.Second, with(r, 1, guber.Behavior_RESET_REMAINING), under, 2, end},
		{3 * time.Second, with(r, 3, 0), over, 2, end},
		{3 * time.Second, with(r, 3, guber.Behavior_DRAIN_OVER_LIMIT), over, 0, end},
		{end, with(r, 1, 0), under, 2, end + time.Minute}, // the next window
	})
}

func TestGregorianOnTheTable(t *testing.T) {
	// 2 an hour, by the calendar: t0 is 12:00:30.25, the hour ends at 13:00.
	r := &guber.RateLimitReq{Name: "n", UniqueKey: "g", Limit: 2, Duration: guber.GregorianHours}
	g := guber.Behavior_DURATION_IS_GREGORIAN
	end := time.Hour - 30250*time.Millisecond
	runSteps(t, []step{
		{0, with(r, 2, g), guber.Status_UNDER_LIMIT, 0, end},
		{time.Minute, with(r, 1, g), guber.Status_OVER_LIMIT, 0, end},
		{end, with(r, 1, g), guber.Status_UNDER_LIMIT, 1, end + time.Hour},
	})
}

func TestLeakyBucketOnTheTable(t *testing.T) {
	// 10 a minute (a token each 6 s), a burst of 10.
	r := &guber.RateLimitReq{Name: "n", UniqueKey: "l", Limit: 10, Duration: 60000, Algorithm: guber.Algorithm_LEAKY_BUCKET}
	under, over := guber.Status_UNDER_LIMIT, guber.Status_OVER_LIMIT
	runSteps(t, []step{
		{0, with(r, 4, 0), under, 6, 24 * time.Second},
		{0, with(r, 6, 0), under, 0, time.Minute},
		{0, with(r, 1, 0), over, 0, time.Minute},
		{6 * time.Second, with(r, 0, 0), under, 1, 6*time.Second + 54*time.Second}, // one token earned
		{9 * time.Second, with(r, 1, 0), under, 0, 9*time.Second + time.Minute},    // half of the next earned too
		{9 * time.Second, with(r, 0, guber.Behavior_RESET_REMAINING), under, 10, 9 * time.Second},
		{9 * time.Second, with(r, 8, 0), under, 2, 9*time.Second + 48*time.Second},
		{9 * time.Second, with(r, 3, guber.Behavior_DRAIN_OVER_LIMIT), over, 0, 9*time.Second + time.Minute},
	})
}
