package admin

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// The status page's history: every historyStep the Server samples the
// policies' OK and NO counters, and keeps the last historyLen intervals.
const (
	historyStep = 5 * time.Second
	historyLen  = 180 // 15 minutes of 5 s intervals
	// historyNamed is how many policies an interval keeps by name, the
	// busiest in it; the others are summed as one. A chart draws as many
	// series plus one for the rest, whatever the number of policies.
	historyNamed = 8
)

// history is a fixed-size ring of per-policy query counts over successive
// intervals. Its memory is fixed by its length and historyNamed, whatever
// the number of policies. The zero history is not usable: make it with
// newHistory. It is safe for concurrent use.
type history struct {
	mu     sync.Mutex
	ring   []interval // fixed length; ring[next] is overwritten next
	next   int
	n      int           // intervals held, up to len(ring)
	prev   []policyCount // every policy's counters at prevAt
	prevAt time.Time     // zero before the first sample

	stopOnce sync.Once
	stopc    chan struct{}
	done     chan struct{} // closed when the sampler returns; nil if never started
}

// interval is the queries answered between the sample before End and End.
type interval struct {
	End     time.Time
	Seconds float64
	Named   [historyNamed]policyCount // the busiest policies, heaviest first; Name "" for unused slots
	Other   policyCount               // the other policies together, Name ""
}

// policyCount is one policy's OK and NO answers.
type policyCount struct {
	Name   string
	OK, NO uint64
}

func (c policyCount) total() uint64 { return c.OK + c.NO }

// newHistory returns an empty history of length intervals.
func newHistory(length int) *history {
	return &history{ring: make([]interval, length), stopc: make(chan struct{})}
}

// record samples the policies' counters (counted over the process's life)
// at now and adds the interval since the previous sample. The first sample
// only sets the baseline. A clock that steps back, or a counter that goes
// down (a policy's counters start again), is not a negative rate: the
// first takes a new baseline, the second counts from zero.
func (h *history) record(now time.Time, policies []bucket.PolicyStats) {
	cur := make([]policyCount, len(policies))
	for i, p := range policies {
		cur[i] = policyCount{Name: p.Name, OK: p.OK, NO: p.NO}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	prev, prevAt := h.prev, h.prevAt
	h.prev, h.prevAt = cur, now
	if prevAt.IsZero() || !now.After(prevAt) {
		return
	}
	deltas := make([]policyCount, 0, len(cur))
	for _, c := range cur {
		d := c
		if i := slices.IndexFunc(prev, func(p policyCount) bool { return p.Name == c.Name }); i >= 0 {
			p := prev[i]
			if c.OK >= p.OK && c.NO >= p.NO {
				d.OK, d.NO = c.OK-p.OK, c.NO-p.NO
			}
		}
		deltas = append(deltas, d)
	}
	slices.SortStableFunc(deltas, func(a, b policyCount) int {
		return cmp.Or(cmp.Compare(b.total(), a.total()), cmp.Compare(a.Name, b.Name))
	})
	iv := interval{End: now, Seconds: now.Sub(prevAt).Seconds()}
	for i, d := range deltas {
		if i < historyNamed && d.total() > 0 {
			iv.Named[i] = d
			continue
		}
		iv.Other.OK += d.OK
		iv.Other.NO += d.NO
	}
	h.ring[h.next] = iv
	h.next = (h.next + 1) % len(h.ring)
	h.n = min(h.n+1, len(h.ring))
}

// intervals returns the intervals held, oldest first.
func (h *history) intervals() []interval {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]interval, 0, h.n)
	for i := range h.n {
		out = append(out, h.ring[(h.next-h.n+i+len(h.ring))%len(h.ring)])
	}
	return out
}

// start samples snapshot every step until stop, the first time one step
// from now. Call it at most once.
func (h *history) start(step time.Duration, snapshot func() Snapshot, now func() time.Time) {
	h.done = make(chan struct{})
	go func() {
		defer close(h.done)
		t := time.NewTicker(step)
		defer t.Stop()
		for {
			select {
			case <-h.stopc:
				return
			case <-t.C:
				h.record(now(), snapshot().Policies)
			}
		}
	}()
}

// stop ends the sampler started by start, and waits up to wait for it: a
// sample stuck in the snapshot function ends when that returns. It is
// safe to call more than once, and without start.
func (h *history) stop(wait time.Duration) {
	h.stopOnce.Do(func() { close(h.stopc) })
	if h.done == nil {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-h.done:
	case <-t.C:
	}
}

// series is a history drawn as lines: line j's value in interval i is
// Decisions[j][i] (OK and NO) or Refusals[j][i] (NO), per second. Line j
// is the policy Names[j]; when Other is set, one more line after them sums
// the policies not named.
type series struct {
	At        []time.Time // the intervals' ends
	Names     []string    // at most historyNamed policies, busiest first
	Other     bool        // the last line is the other policies; set only if it is ever above zero
	Decisions [][]float64
	Refusals  [][]float64
}

// chartSeries picks the historyNamed policies with the most queries over
// ivs and returns their rates, with every other policy summed as one line.
// A charted policy that was not among an interval's own busiest is counted
// in that interval's "other".
func chartSeries(ivs []interval) series {
	sums := map[string]uint64{}
	for _, iv := range ivs {
		for _, c := range iv.Named {
			if c.Name != "" {
				sums[c.Name] += c.total()
			}
		}
	}
	names := make([]string, 0, len(sums))
	for name := range sums {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(sums[b], sums[a]), cmp.Compare(a, b)) })
	names = names[:min(len(names), historyNamed)]
	index := make(map[string]int, len(names))
	for j, name := range names {
		index[name] = j
	}
	width := len(names) + 1 // the last is "other"
	s := series{At: make([]time.Time, len(ivs)), Decisions: make([][]float64, width), Refusals: make([][]float64, width)}
	for j := range width {
		s.Decisions[j] = make([]float64, len(ivs))
		s.Refusals[j] = make([]float64, len(ivs))
	}
	otherUsed := false
	for i, iv := range ivs {
		s.At[i] = iv.End
		other := iv.Other
		for _, c := range iv.Named {
			if c.Name == "" {
				continue
			}
			if j, ok := index[c.Name]; ok {
				s.Decisions[j][i] = float64(c.total()) / iv.Seconds
				s.Refusals[j][i] = float64(c.NO) / iv.Seconds
				continue
			}
			other.OK += c.OK
			other.NO += c.NO
		}
		s.Decisions[width-1][i] = float64(other.total()) / iv.Seconds
		s.Refusals[width-1][i] = float64(other.NO) / iv.Seconds
		otherUsed = otherUsed || other.total() > 0
	}
	s.Names, s.Other = names, otherUsed
	if !otherUsed {
		s.Decisions, s.Refusals = s.Decisions[:width-1], s.Refusals[:width-1]
	}
	return s
}
