package bucket

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// This file owns the registry of limits callers state (limit.go): each
// distinct Quota in use is compiled once, into one of MaxQuotas slots,
// and a record decided under it keeps quotaBase plus its slot as its
// policy index, so that every path that reads a record's policy (the
// sweep, eviction, drains, exports, peers' hits) applies the record's
// own limit. A slot no tracked tag uses is taken back when the registry
// is full (reclaim), so the registry is bounded however many distinct
// limits callers send.

// quotaBase is the policy index of quota slot 0. Configured policies'
// indexes stay below it (limits.MaxPolicies).
const quotaBase = 1 << 15

var _ [quotaBase - MaxPolicies - 1]struct{} // a policy set's indexes stay below quotaBase
var _ [freePolicy - quotaBase - MaxQuotas]struct{}

// reclaimEvery is how often, at most, a full registry looks for slots no
// tag uses; reclaimIdle is how long a slot must have gone unasked before
// it may be taken back (a query interns its quota, then takes its
// shard's lock: the slot must not change hands in between).
const (
	reclaimEvery = time.Second
	reclaimIdle  = time.Second
)

// quotas is a table's registry. Safe for concurrent use: slots are read
// without a lock, and written under mu.
type quotas struct {
	mu          sync.Mutex
	reg         *region       // publishes each slot for processes deciding in process
	bySpec      map[Quota]int // slot of each quota in use
	free        []int         // slots taken back
	next        int           // slots below next have been handed out
	lastReclaim int64
	reclaimed   uint64 // slots taken back over the table's life
	refused     uint64 // quotas refused for want of a slot

	slots [MaxQuotas]quotaSlot
}

// quotaSlot is one slot: its compiled limit (nil while free), and when a
// query last asked for it.
type quotaSlot struct {
	c    atomic.Pointer[compiled]
	used atomic.Int64
}

// get returns the compiled limit of policy index pi, a quota's, or nil
// when pi names no slot in use.
func (q *quotas) get(pi int) *compiled {
	if i := pi - quotaBase; i >= 0 && i < MaxQuotas {
		return q.slots[i].c.Load()
	}
	return nil
}

// intern returns the policy index and compiled limit of quota l, which
// must be valid, handing out a slot if it has none; ErrTooManyLimits when
// every slot is in use. scan takes back the slots no record uses, for a
// full registry (at most once per reclaimEvery).
func (q *quotas) intern(l Quota, now int64, scan func(used []bool)) (int, *compiled, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if i, ok := q.bySpec[l]; ok {
		q.slots[i].used.Store(now)
		return quotaBase + i, q.slots[i].c.Load(), nil
	}
	if len(q.free) == 0 && q.next == MaxQuotas && now-q.lastReclaim >= int64(reclaimEvery) {
		q.lastReclaim = now
		used := make([]bool, MaxQuotas)
		scan(used)
		for i := range used {
			if c := q.slots[i].c.Load(); c != nil && !used[i] && now-q.slots[i].used.Load() >= int64(reclaimIdle) {
				delete(q.bySpec, c.quota)
				q.slots[i].c.Store(nil)
				q.publish(i, nil)
				q.free = append(q.free, i)
				q.reclaimed++
			}
		}
	}
	var i int
	switch {
	case len(q.free) > 0:
		i = q.free[len(q.free)-1]
		q.free = q.free[:len(q.free)-1]
	case q.next < MaxQuotas:
		i = q.next
		q.next++
	default:
		q.refused++
		return 0, nil, ErrTooManyLimits
	}
	c := compileQuota(l)
	if q.bySpec == nil {
		q.bySpec = make(map[Quota]int)
	}
	q.bySpec[l] = i
	q.slots[i].used.Store(now)
	q.slots[i].c.Store(c)
	q.publish(i, c)
	return quotaBase + i, c, nil
}

// publish writes slot i's limit into the table's quota block.
func (q *quotas) publish(i int, c *compiled) {
	if q.reg != nil && q.reg.quotas != nil {
		q.reg.writeQuota(i, c)
	}
}

// QuotaStats are the registry's counters.
type QuotaStats struct {
	InUse     int    // distinct stated limits held now
	Reclaimed uint64 // slots taken back from limits no tag used
	Refused   uint64 // stated limits refused for want of a slot (ErrTooManyLimits)
}

// QuotaStats returns the registry's counters.
func (t *Table) QuotaStats() QuotaStats {
	q := &t.quotas
	q.mu.Lock()
	defer q.mu.Unlock()
	return QuotaStats{InUse: len(q.bySpec), Reclaimed: q.reclaimed, Refused: q.refused}
}

// usedQuotas marks in used the slots of the quotas the table's records
// hold, shard by shard under each shard's lock.
func (t *Table) usedQuotas(used []bool) {
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for _, e := range s.index.slots {
			if e == 0 {
				continue
			}
			if k := s.arena.rec(uint32(e)).policy() - quotaBase; k >= 0 && k < len(used) {
				used[k] = true
			}
		}
		s.mu.Unlock()
	}
}

// compileQuota compiles a valid quota into the table's integer form: a
// leaky bucket as a policy is; a window as a bucket whose clock stands at
// the window's start (at), earning its Burst tokens back all at once
// when the next window starts.
func compileQuota(l Quota) *compiled {
	p := Policy{Name: "stated", Rate: l.Rate, Burst: l.Burst, Action: Limit}
	if l.Algorithm == Window {
		p.Rate = float64(l.Burst) / l.window().Seconds()
	}
	c := &compiled{Policy: p, whole: p, quota: l}
	if l.Algorithm == Window {
		c.window = int64(l.window())
		c.perToken = max(c.window/int64(l.Burst), 1)
	} else {
		c.perToken = int64(max(math.Round(float64(time.Second)/l.Rate), 1))
	}
	c.allowAt = int64(p.Burst-1) * c.perToken
	c.debtAt = int64(p.Burst) * c.perToken
	return c
}

// window is a Window quota's window length: Period, or the shortest
// length of its calendar unit (a window's tokens never reach past its
// end, however long the month).
func (l Quota) window() time.Duration {
	const day = 24 * time.Hour
	switch l.Calendar {
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	case Day:
		return day
	case Week:
		return 7 * day
	case Month:
		return 28 * day
	case Year:
		return 365 * day
	}
	return l.Period
}

// at is the instant a bucket under c stands at when the clock reads now:
// now itself for a leaky bucket, the current window's start for a
// window. Every "tat <= at means full" of the table holds with it.
func (c *compiled) at(now int64) int64 {
	if c.window == 0 {
		return now
	}
	if c.quota.Calendar != None {
		return calendarStart(now, c.quota.Calendar)
	}
	w := now / c.window * c.window
	if w > now { // now before the epoch
		w -= c.window
	}
	return w
}

// nextWindow is the start of the first window starting at or after t.
func (c *compiled) nextWindow(t int64) int64 {
	if c.quota.Calendar != None {
		w := calendarStart(t, c.quota.Calendar)
		if w < t {
			w = calendarNext(w, c.quota.Calendar)
		}
		return w
	}
	w := c.at(t)
	if w < t {
		w += c.window
	}
	return w
}

// calendarStart is the start, in UTC, of the calendar unit u holding the
// instant ns (weeks start on Sunday).
func calendarStart(ns int64, u Calendar) int64 {
	t := time.Unix(0, ns).UTC()
	y, m, d := t.Date()
	var s time.Time
	switch u {
	case Minute:
		s = t.Truncate(time.Minute)
	case Hour:
		s = t.Truncate(time.Hour)
	case Day:
		s = time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	case Week:
		s = time.Date(y, m, d-int(t.Weekday()), 0, 0, 0, 0, time.UTC)
	case Month:
		s = time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	default:
		s = time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return s.UnixNano()
}

// calendarNext is the start of the unit after the one starting at ns.
func calendarNext(ns int64, u Calendar) int64 {
	t := time.Unix(0, ns).UTC()
	switch u {
	case Minute:
		t = t.Add(time.Minute)
	case Hour:
		t = t.Add(time.Hour)
	case Day:
		t = t.AddDate(0, 0, 1)
	case Week:
		t = t.AddDate(0, 0, 7)
	case Month:
		t = t.AddDate(0, 1, 0)
	default:
		t = t.AddDate(1, 0, 0)
	}
	return t.UnixNano()
}

// lower caps l at what policy p allows (QuotaLower): a rate and a burst
// no higher than p's. A window's rate is its Burst over its length.
func (l Quota) lower(p *Policy) Quota {
	l.Burst = min(l.Burst, p.Burst)
	switch l.Algorithm {
	case Leaky:
		l.Rate = min(l.Rate, p.Rate)
	case Window:
		if float64(l.Burst)/l.window().Seconds() > p.Rate {
			// Fewer hits per window, so that the window's rate is p's.
			l.Burst = max(int(p.Rate*l.window().Seconds()), 1)
		}
	}
	return l
}
