package client

import (
	"sync"
	"sync/atomic"
	"time"
)

// health is a Client's backoff state. Healthy, it costs Allow two atomic
// loads. A failure opens an episode: retryAt is set, and every query is
// answered by the fail mode until then. Queries carry the generation they
// were admitted in, so the many queries that fail together (all those
// queued on one silent connection) count as one failure, not as many
// doublings of the backoff.
type health struct {
	min, max time.Duration
	hold     time.Duration    // how long a probe may take before another is let through
	now      func() time.Time // time.Now; tests step it

	retryAt atomic.Int64  // Unix nanoseconds when the backoff ends; 0 when healthy
	gen     atomic.Uint64 // +1 per counted failure

	mu       sync.Mutex
	failures int // consecutive counted failures
}

// admit reports whether a query may be sent, and its generation. When a
// backoff has just ended, exactly one caller is admitted, as the probe:
// the others are held off for hold, or until the probe succeeds.
func (h *health) admit() (gen uint64, ok bool) {
	gen = h.gen.Load()
	r := h.retryAt.Load()
	if r == 0 {
		return gen, true
	}
	now := h.now().UnixNano()
	if now < r {
		return 0, false
	}
	if !h.retryAt.CompareAndSwap(r, now+int64(h.hold)) {
		return 0, false
	}
	return h.gen.Load(), true
}

// fail counts a failure of a query admitted in generation gen, unless a
// failure of that generation was already counted, and backs off for
// min * 2^(failures-1), capped at max.
func (h *health) fail(gen uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if gen != h.gen.Load() {
		return
	}
	h.failures++
	h.retryAt.Store(h.now().Add(h.backoff(h.failures)).UnixNano())
	h.gen.Add(1)
}

// backoff returns the pause after n consecutive failures.
func (h *health) backoff(n int) time.Duration {
	d := h.min
	for i := 1; i < n && d < h.max; i++ {
		d *= 2
	}
	return min(d, h.max)
}

// succeed ends the backoff when a query admitted in the current generation
// (the probe) was answered. A late answer to a query admitted before the
// last failure changes nothing.
func (h *health) succeed(gen uint64) {
	if h.retryAt.Load() == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if gen == h.gen.Load() {
		h.failures = 0
		h.retryAt.Store(0)
	}
}
