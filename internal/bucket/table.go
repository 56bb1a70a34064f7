// Package bucket is dthrottle's tag table: a leaky bucket per tag, with the
// hits served locally counted until a reporter drains them for the peers, and
// the hits reported by peers subtracted, possibly into debt.
//
// The table computes in integer nanoseconds. Each entry keeps its
// theoretical arrival time tat instead of a token count: the bucket is full
// when tat <= now, and holds burst - (tat-now)/period tokens otherwise, where
// period is the time to earn one token (1/rate). This is the same bucket as
// "tokens, last" with refill capped at burst (docs/design.md, Semantics), but it needs one
// integer per tag and no arithmetic can round a decision the wrong way.
//
// Every operation takes now. Each shard of the table keeps the latest now it
// has seen, so a clock that steps back refills nothing and refunds nothing.
// The table has no goroutines and knows nothing of sockets or peers.
//
// # Memory
//
// A tracked tag costs one record (its bucket state, 18 bytes, then its
// key) in its shard's arena, one 8-byte slot in its shard's index, an
// open-addressing hash table kept at most 80% full, and, while it has
// unreported hits, 4 bytes in its shard's list of them: 48 bytes of heap
// for a 13-byte tag (a 32-byte record), about 56 resident in the daemon.
// None of these hold a pointer, and the arena's chunks are never freed
// (the records of forgotten tags are reused), so the garbage collector
// has nothing per tag to scan and filling the table leaves little garbage.
package bucket

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/dthrottle/dthrottle/internal/limits"
)

// Hard limits of a Config, which the config file is validated against
// (package limits holds those the configuration shares).
const (
	// MinTagBytes is the least MaxTagBytes: a digest key is the tag's
	// first MaxTagBytes-31 bytes and 32 bytes of SHA-256.
	MinTagBytes = limits.MinTagBytes
	// MaxTagBytesLimit is the most MaxTagBytes: the largest record the
	// arena makes holds a digest key at this, MaxTagBytesLimit+1 bytes,
	// the longest key any table keeps.
	MaxTagBytesLimit = 1 << 16
	// MaxPolicies is the most prefix policies a table holds: a record
	// keeps its policy's index, the default's included, in 16 bits.
	MaxPolicies = limits.MaxPolicies
	// MaxBurst is the largest burst a configuration gives a policy, and
	// so the most tokens one query may cost: a cost above the burst could
	// never be served.
	MaxBurst = limits.MaxBurst
)

// A tag as long as the longest line fits the table.
var _ [MaxTagBytesLimit - limits.MaxLine]struct{}

// MaxKeyBytes is the longest key a table with the given MaxTagBytes
// keeps: a digest key, MaxTagBytes-31 bytes of the tag and 32 of SHA-256.
func MaxKeyBytes(maxTagBytes int) int { return maxTagBytes - 31 + 32 }

// Config describes a Table. Its zero value is not usable: see New.
type Config struct {
	Default  Policy   // applies to every tag no prefix policy matches
	Policies []Policy // the longest matching Prefix wins
	// MaxTags is the hard cap on tracked tags. At the cap, inserting a tag
	// evicts the least harmful entry (see Stats.Evictions).
	MaxTags int
	// MaxTagBytes is the longest tag kept verbatim; a longer one is keyed by
	// its first MaxTagBytes-31 bytes and a SHA-256 of the whole tag. From
	// MinTagBytes to MaxTagBytesLimit.
	MaxTagBytes int
	// Shared puts the table in memory other processes may map and decide
	// from (docs/shared-table.md; SharedFiles). Otherwise the same layout
	// lives in private memory.
	Shared bool
}

// Hit is a tag and a count of hits, as drained for a report.
type Hit struct {
	Key   string
	Count uint32
	// Quota is the limit a caller stated for the tag, which the hits
	// were served under; the zero Quota (Burst 0) for the tag's policy.
	Quota Quota
}

// Stats are counters over the table's life.
type Stats struct {
	Tags        int    // entries tracked now
	Evictions   uint64 // entries evicted by the MaxTags cap
	EvictedHits uint64 // unreported hits lost with evicted entries
	// NoRoom counts tags served untracked because the table's memory,
	// laid out when it was made, had no room for their records: a reload
	// raised max_tags or max_tag_bytes far past what it was made for.
	NoRoom uint64
}

// PolicyStats counts the queries one policy answered.
type PolicyStats struct {
	Policy
	OK, NO uint64
	// DryRunRefused counts the queries served (and counted in OK) under
	// DryRun that the limit would have refused.
	DryRunRefused uint64
	// Charges counts the charges applied to the policy's buckets (Charge
	// with n > 0), and ChargedTokens the tokens they took; neither is a
	// query.
	Charges, ChargedTokens uint64
}

// State is a tag as seen at an instant, for tests and the admin view.
type State struct {
	Policy     Policy  // the policy the tag falls under
	Tracked    bool    // false: the table holds nothing for it (a full bucket)
	Tokens     float64 // may be negative: debt from peers' hits
	Unreported uint32
}

// Table is the tag table. It is safe for concurrent use: tags are spread
// over independently locked shards, so concurrent queries rarely wait on
// each other. Create it with New.
type Table struct {
	shards []shard
	shift  uint // a key's shard is its hash >> shift (64 for one shard)
	seed   uint64
	reg    *region // the memory the records and index live in

	// policies routes allow and deny tags without taking a lock; each
	// shard holds its own copy for its entries, swapped under its lock.
	policies    atomic.Pointer[policySet]
	maxTagBytes atomic.Int64
	slots       atomic.Int64 // index slots over all shards: how big the table is
	reconfig    sync.Mutex   // one Reconfigure at a time
	quotas      quotas       // the limits callers state (quota.go)
}

// maxShards is enough to keep lock contention negligible on the machines a
// throttling daemon runs on, and few enough that draining stays cheap.
const maxShards = 64

// shardLimit is how many shards a table may have: four per CPU the
// process may use when the package is initialised, a power of two, at
// most maxShards. More would not cut
// lock contention further, and fewer shards mean a pipelined batch
// (AllowBatch) finds more of its queries under each lock it takes, and
// the CPUs pass fewer locks' cache lines between them.
var shardLimit = func() int {
	n := 1
	for n < maxShards && n < 4*runtime.GOMAXPROCS(0) {
		n *= 2
	}
	return n
}()

// New returns an empty table.
func New(cfg Config) (*Table, error) {
	set, err := checkConfig(cfg, nil)
	if err != nil {
		return nil, err
	}
	// One shard per 1024 tags of capacity, a power of two, at most shardLimit:
	// small tables have one shard, so their eviction order is exact. The
	// number of shards stays as created.
	n := 1
	for n*2 <= shardLimit && n*2*1024 <= cfg.MaxTags {
		n *= 2
	}
	t := &Table{shards: make([]shard, n), shift: uint(64 - bits.TrailingZeros(uint(n))), seed: randomUint64()}
	reg, err := newRegion(cfg.Shared, n, cfg.MaxTags, cfg.MaxTagBytes, t.seed)
	if err != nil {
		return nil, err
	}
	t.reg = reg
	t.quotas.reg = reg
	reg.releaseWith(t)
	t.policies.Store(&set)
	t.maxTagBytes.Store(int64(cfg.MaxTagBytes))
	reg.writePolicies(set)
	for i := range t.shards {
		t.shards[i].init(i, reg, shardCapacity(cfg.MaxTags, n, i), uint64(i)+1, t.seed, set, &t.slots)
		t.shards[i].setQuotas(&t.quotas)
	}
	return t, nil
}

func checkConfig(cfg Config, old policySet) (policySet, error) {
	if cfg.MaxTags < 1 || cfg.MaxTags > MaxTagsLimit {
		return nil, fmt.Errorf("bucket: max tags must be between 1 and %d, got %d", MaxTagsLimit, cfg.MaxTags)
	}
	if cfg.MaxTagBytes < MinTagBytes || cfg.MaxTagBytes > MaxTagBytesLimit {
		return nil, fmt.Errorf("bucket: max tag bytes must be between %d and %d, got %d", MinTagBytes, MaxTagBytesLimit, cfg.MaxTagBytes)
	}
	return newPolicySet(cfg.Default, cfg.Policies, old)
}

// shardCapacity spreads maxTags over n shards exactly.
func shardCapacity(maxTags, n, i int) int {
	c := maxTags / n
	if i < maxTags%n {
		c++
	}
	return c
}

// Reconfigure applies new policies, rates, bursts and caps at now without
// losing state: every tracked tag keeps its tokens (capped at its new
// burst) and its unreported hits, under the policy it now matches; tags
// now under an allow or deny policy are forgotten; a lower MaxTags evicts
// down to it at once. Refusals not yet harvested stay under their
// policy's name (TakeRefusals). The number of shards stays as created. On error the
// table is unchanged.
func (t *Table) Reconfigure(now time.Time, cfg Config) error {
	t.reconfig.Lock()
	defer t.reconfig.Unlock()
	set, err := checkConfig(cfg, *t.policies.Load())
	if err != nil {
		return err
	}
	ns := now.UnixNano()
	t.foldShared(*t.policies.Load())
	t.policies.Store(&set)
	t.maxTagBytes.Store(int64(cfg.MaxTagBytes))
	t.reg.setMaxKey(cfg.MaxTagBytes)
	t.reg.writePolicies(set)
	byName := make(map[string]int, len(set))
	for i := range set {
		byName[set[i].Name] = i
	}
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		s.collectRefused() // under the policies the records' keys matched
		s.reconfigure(s.advance(ns), set, shardCapacity(cfg.MaxTags, len(t.shards), i))
		s.remapRefusals(set, byName)
		s.mu.Unlock()
	}
	return nil
}

// ErrUnknownTag is returned by Peek for a tag the table does not track.
var ErrUnknownTag = errors.New("bucket: tag not tracked")

// Allow reports whether a query for tag at now is served. A served query
// takes one token and counts one unreported hit; a refused one changes
// nothing. An empty tag is served and not accounted. Allow does not retain
// tag.
func (t *Table) Allow(now time.Time, tag []byte) bool {
	if len(tag) == 0 {
		return true
	}
	set := t.policies.Load()
	pi := match(*set, tag)
	if p := &(*set)[pi]; p.Action != Limit {
		return p.answer()
	}
	if max := int(t.maxTagBytes.Load()); len(tag) > max {
		tag = digestKey(tag, max)
	}
	return t.allowKey(now.UnixNano(), tag, Hash(t.seed, tag), set, pi)
}

// allowKey is Allow at ns (Unix nanoseconds) for a key that hashes to h,
// whose tag matched limit policy pi of set.
func (t *Table) allowKey(ns int64, key []byte, h uint64, set *policySet, pi int) bool {
	s := &t.shards[h>>t.shift]
	s.mu.Lock()
	if &s.policies[0] != &(*set)[0] {
		// A reload swapped the policies in between: ask the shard's.
		if pi = match(s.policies, key); s.policies[pi].Action != Limit {
			ok := s.policies[pi].answer()
			s.mu.Unlock()
			return ok
		}
	}
	ok := s.allow(s.advance(ns), h, key, pi)
	s.mu.Unlock()
	return ok
}

// answer is the fixed answer of an allow or deny policy, counted; a dry
// run of deny serves.
func (c *compiled) answer() bool {
	ok := c.Action == Allow
	if !ok && c.DryRun {
		ok = true
		c.counts.countDry()
	}
	c.counts.count(ok)
	return ok
}

// AllowNow is shorthand for Allow(time.Now(), tag).
func (t *Table) AllowNow(tag []byte) bool { return t.Allow(time.Now(), tag) }

// Spend subtracts hits that a peer served for key at now. A key the table
// does not track starts from a full bucket first. The bucket may go below
// zero: that debt is what makes every node reflect the tag's global count.
// Keys of allow and deny policies are ignored, and so are keys longer
// than any table keeps (MaxTagBytesLimit+1 bytes). Spend takes keys as
// Drain returns them (long tags already digested).
func (t *Table) Spend(now time.Time, key string, hits uint32) {
	if !spendable(key, hits) {
		return
	}
	ns := now.UnixNano()
	h, s := t.shardFor(key)
	s.mu.Lock()
	s.spend(s.advance(ns), h, bytesOf(key), hits)
	s.mu.Unlock()
}

// Forget drops key and its unreported hits, as if it had never been seen.
// Peers are not told. It reports whether the key was tracked.
func (t *Table) Forget(key string) bool {
	h, s := t.shardFor(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	pos, ref := s.index.lookup(&s.arena, h, bytesOf(key))
	if ref != 0 {
		s.dropRefused(ref)
		s.arena.rec(ref).kill()
		s.removeAt(pos)
	}
	return ref != 0
}

// Drain appends to dst every tag with unreported hits, and their counts,
// and zeroes those counts: the hits served here and those served by
// processes deciding from the shared table, which mark the records they
// touch in the dirty bitmap. It takes time in proportion to the table's
// memory in use (a bit per 8 bytes of records) and to the tags with hits.
// The refusals counted in process go to the refusal sketches. The keys
// drained from one shard share one allocation.
//
// A record's hits are capped at what its tag's policy could have served
// between the last drain and the latest time the shard has seen.
func (t *Table) Drain(dst []Hit) []Hit {
	var lens []int
	var keys []byte
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		first := len(dst)
		lens, keys = lens[:0], nil
		dst, lens, keys = s.drain(s.now, dst, lens, keys)
		s.mu.Unlock()
		all := unsafe.String(unsafe.SliceData(keys), len(keys)) // keys is never written again
		for j, n := range lens {
			dst[first+j].Key = all[:n]
			all = all[n:]
		}
	}
	return dst
}

// Peek returns the state of key at now without changing it, or
// ErrUnknownTag with the state of a full bucket under the key's policy.
func (t *Table) Peek(now time.Time, key string) (State, error) {
	h, s := t.shardFor(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	n := max(s.now, now.UnixNano())
	_, ref := s.index.lookup(&s.arena, h, bytesOf(key))
	p := &s.policies[match(s.policies, key)]
	if ref == 0 {
		return State{Policy: p.Policy, Tokens: float64(p.Burst)}, ErrUnknownTag
	}
	r := s.arena.rec(ref)
	if r.policy() >= quotaBase {
		c := s.policyOf(r)
		v := c.stated(p, Verdict{}, n, n)
		return State{Policy: v.Policy, Tracked: true, Tokens: c.tokens(r.tat(), c.at(n)), Unreported: r.unreported()}, nil
	}
	return State{Policy: p.Policy, Tracked: true, Tokens: p.tokens(r.tat(), n), Unreported: r.unreported()}, nil
}

// Stats returns the table's counters.
func (t *Table) Stats() Stats {
	var st Stats
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		st.Tags += s.index.count
		st.Evictions += s.evictions
		st.EvictedHits += s.evictedHits
		st.NoRoom += s.noRoom
		s.mu.Unlock()
	}
	return st
}

// PolicyStats returns, for each current policy (the default first), the
// queries it answered OK and NO and the charges it took over the table's
// life, reloads included.
func (t *Table) PolicyStats() []PolicyStats {
	t.reconfig.Lock()
	defer t.reconfig.Unlock()
	set := *t.policies.Load()
	out := make([]PolicyStats, len(set))
	for i := range set {
		ok, no, dry := set[i].counts.totals()
		charges, charged := set[i].counts.chargeTotals()
		out[i] = PolicyStats{Policy: set[i].Policy, OK: ok, NO: no, DryRunRefused: dry, Charges: charges, ChargedTokens: charged}
	}
	for si := range counterStripes {
		for pi := 0; pi < len(out) && pi < countedPolicies; pi++ {
			ok, no, dry := t.reg.counted(si, pi)
			out[pi].OK += ok
			out[pi].NO += no
			out[pi].DryRunRefused += dry
		}
	}
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for pi := range out {
			c := s.count(pi)
			out[pi].OK += c.ok
			out[pi].NO += c.no
		}
		s.mu.Unlock()
	}
	return out
}

// Fingerprint identifies what the table's policies do: two tables with
// the same prefixes, actions, rates and bursts have the same fingerprint,
// whatever the policies are named or the order they were given in.
func (t *Table) Fingerprint() uint64 { return t.policies.Load().fingerprint() }

// Key returns the key the table uses for tag: the tag itself, or for a tag
// longer than the configured maximum, its digest form.
func (t *Table) Key(tag []byte) string {
	if max := int(t.maxTagBytes.Load()); len(tag) > max {
		return string(digestKey(tag, max))
	}
	return string(tag)
}

// shardFor returns the hash of key and its shard.
func (t *Table) shardFor(key string) (uint64, *shard) {
	h := hashString(t.seed, key)
	return h, &t.shards[h>>t.shift]
}

// spendable reports whether Spend applies hits for key: a key no table
// could keep has no bucket to spend from.
func spendable(key string, hits uint32) bool {
	return key != "" && len(key) <= MaxTagBytesLimit+1 && hits != 0
}

// bytesOf views s as bytes without copying, for lookups that neither
// write nor retain them.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// digestKey keys a long tag by its first max-31 bytes, which keep the prefix
// policies match on, and a SHA-256 of the whole tag. The key is max+1 bytes
// long, a length no verbatim tag has.
func digestKey(tag []byte, max int) []byte {
	sum := sha256.Sum256(tag)
	key := make([]byte, 0, max+1)
	key = append(key, tag[:max-31]...)
	return append(key, sum[:]...)
}
