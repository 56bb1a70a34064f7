package top

import (
	"sync"
	"time"
	"unsafe"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/top/topk"
)

// This file owns the Board and this node's window: what the daemon feeds
// it every interval, summed per policy and count into the parts of the
// window.

// Board keeps this node's heaviest tags over a sliding window and its
// peers' latest reports. Create it with New. It is safe for concurrent
// use: the daemon feeds it while the admin endpoint reads views.
type Board struct {
	cfg  Config
	part int64 // a part's length, nanoseconds

	// feed is held by AddServed, alone, over its sketches.
	feed     sync.Mutex
	sketches map[string]*topk.Sketch // the served hits of this interval, by policy
	spare    []*topk.Sketch          // sketches no policy used last time

	mu     sync.Mutex
	tracks map[string]*track // by policy, at most cfg.Policies
	latest int64             // the latest part fed: time never runs backwards
	since  time.Time         // when the board was first fed; zero before
	peers  map[uint64]*peer  // by node id, at most cfg.Nodes
}

// track is one policy's window: for each count, a ring of the window's
// parts, the part numbered n at n mod Parts.
type track struct {
	parts [numBy][]part
}

// part is a summary of one part of the window: the counts of the
// intervals fed while the clock was in [n×length, (n+1)×length). A
// summary stored is never changed, only replaced whole, so a reader may
// keep it after the lock is released.
type part struct {
	n   int64
	sum topk.Summary
}

// New returns an empty Board.
func New(cfg Config) (*Board, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Board{
		cfg:      cfg,
		part:     int64(cfg.Window) / int64(cfg.Parts),
		sketches: map[string]*topk.Sketch{},
		tracks:   map[string]*track{},
		peers:    map[uint64]*peer{},
	}, nil
}

// AddRefused counts one interval's refusals at now, as the table's
// TakeRefusals harvested them (each list heaviest first).
func (b *Board) AddRefused(now time.Time, refusals []bucket.Refusals) {
	if len(refusals) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.advance(now)
	for _, r := range refusals {
		b.add(n, Refused, r.Policy, r.Summary.Cut(b.cfg.K))
	}
}

// AddServed counts the hits this node served in one interval at now, as
// the table drained them for its peers (Drain): policy gives the name of
// the policy a hit's key counts under (bucket.Table.PolicyName). It does
// not retain hits. The hits are summed per policy in sketches of K
// counters, so an interval of a million tags costs about a million
// policy lookups and sketch additions, taken without the lock views
// read under.
func (b *Board) AddServed(now time.Time, hits []bucket.Hit, policy func(key string) string) {
	b.feed.Lock()
	defer b.feed.Unlock()
	var (
		name string
		sk   *topk.Sketch
		have bool
	)
	for _, h := range hits {
		if h.Key == "" || h.Count == 0 {
			continue
		}
		if p := policy(h.Key); !have || p != name {
			name, sk, have = p, b.sketch(p), true
		}
		if sk != nil {
			sk.Add(unsafe.Slice(unsafe.StringData(h.Key), len(h.Key)), uint64(h.Count)) // read only
		}
	}
	type served struct {
		policy string
		sum    topk.Summary
	}
	var sums []served
	for p, sk := range b.sketches {
		sums = append(sums, served{p, sk.Summary(b.cfg.K)})
		sk.Reset()
		delete(b.sketches, p)
		b.spare = append(b.spare, sk)
	}
	if len(sums) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.advance(now)
	for _, s := range sums {
		b.add(n, Served, s.policy, s.sum)
	}
}

// sketch returns this interval's sketch of the hits served under policy,
// or nil past cfg.Policies policies. The caller holds b.feed.
func (b *Board) sketch(policy string) *topk.Sketch {
	if sk := b.sketches[policy]; sk != nil {
		return sk
	}
	if len(b.sketches) >= b.cfg.Policies {
		return nil
	}
	var sk *topk.Sketch
	if n := len(b.spare); n > 0 {
		sk, b.spare = b.spare[n-1], b.spare[:n-1]
	} else {
		sk = topk.NewFiltered(b.cfg.K, 8*b.cfg.K)
	}
	b.sketches[policy] = sk
	return sk
}

// partOf returns the number of the part of the window now falls in.
func (b *Board) partOf(now time.Time) int64 {
	ns := now.UnixNano()
	n := ns / b.part
	if ns < 0 && ns%b.part != 0 {
		n--
	}
	return n
}

// advance moves the board's clock to now, unless now is behind it, and
// returns the current part's number. The caller holds b.mu.
func (b *Board) advance(now time.Time) int64 {
	if b.since.IsZero() {
		b.since = now
	}
	b.latest = max(b.latest, b.partOf(now))
	return b.latest
}

// current returns the current part's number at now without moving the
// clock. The caller holds b.mu.
func (b *Board) current(now time.Time) int64 {
	if b.since.IsZero() {
		return b.partOf(now)
	}
	return max(b.latest, b.partOf(now))
}

// slot returns part n's place in a ring.
func (b *Board) slot(n int64) int {
	p := int64(b.cfg.Parts)
	return int(((n % p) + p) % p)
}

// live reports whether part p is in the window whose current part is cur.
func (b *Board) live(p *part, cur int64) bool {
	return p.n > cur-int64(b.cfg.Parts) && p.n <= cur && (p.sum.Total > 0 || len(p.sum.Items) > 0)
}

// add merges one interval's summary s of policy, by one count, into part
// n. The caller holds b.mu.
func (b *Board) add(n int64, by By, policy string, s topk.Summary) {
	if s.Total == 0 && len(s.Items) == 0 {
		return
	}
	tr := b.track(policy, n)
	if tr == nil {
		return
	}
	p := &tr.parts[by][b.slot(n)]
	if p.n != n {
		p.n, p.sum = n, topk.Summary{}
	}
	p.sum = topk.MergeSummaries(b.cfg.K, p.sum, s)
}

// track returns policy's window, making it if fewer than cfg.Policies
// are kept, or in place of one with nothing left in the window at part
// cur; nil if every one kept still counts. The caller holds b.mu.
func (b *Board) track(policy string, cur int64) *track {
	if tr := b.tracks[policy]; tr != nil {
		return tr
	}
	if len(b.tracks) >= b.cfg.Policies {
		for name, tr := range b.tracks {
			if !b.anyLive(tr, cur) {
				delete(b.tracks, name)
				break
			}
		}
		if len(b.tracks) >= b.cfg.Policies {
			return nil
		}
	}
	tr := &track{}
	for by := range tr.parts {
		tr.parts[by] = make([]part, b.cfg.Parts) // empty: never live
	}
	b.tracks[policy] = tr
	return tr
}

// anyLive reports whether tr has a count in the window at part cur.
func (b *Board) anyLive(tr *track, cur int64) bool {
	for by := range tr.parts {
		for i := range tr.parts[by] {
			if b.live(&tr.parts[by][i], cur) {
				return true
			}
		}
	}
	return false
}

// window returns, at part cur, the summaries of the parts of the window
// of policy by one count: the parts to merge. The caller holds b.mu; the
// summaries stay valid after it is released.
func (b *Board) window(tr *track, by By, cur int64) []topk.Summary {
	var sums []topk.Summary
	for i := range tr.parts[by] {
		if p := &tr.parts[by][i]; b.live(p, cur) {
			sums = append(sums, p.sum)
		}
	}
	return sums
}

// covered is how long a window ending at now covers at part cur: from
// the start of its oldest part, or from when the board was first fed if
// that is later. The caller holds b.mu.
func (b *Board) covered(now time.Time, cur int64) time.Duration {
	if b.since.IsZero() {
		return 0
	}
	start := time.Unix(0, (cur-int64(b.cfg.Parts)+1)*b.part)
	if b.since.After(start) {
		start = b.since
	}
	return max(now.Sub(start), 0)
}
