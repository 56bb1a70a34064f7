package bucket

import (
	"time"
)

// spendMax is how many hits SpendBatch applies in one pass.
const spendMax = 256

// spendAheadSlots is the size of table, in index slots, from which
// SpendBatch looks ahead; a variable so that tests can force either way.
var spendAheadSlots int64 = 1 << 12

// SpendBatch applies a peer's report at now: the same as calling Spend for
// each hit in order, but it takes each shard's lock once for all of the
// pass's hits in that shard, and at a large table asks the memory for the
// next hits' entries while it applies one. Hits Spend ignores (an empty
// or overlong key, no count) are ignored. It does not retain hits.
func (t *Table) SpendBatch(now time.Time, hits []Hit) {
	ns := now.UnixNano()
	for len(hits) > 0 {
		n := min(len(hits), spendMax)
		t.spendBatch(ns, hits[:n])
		hits = hits[n:]
	}
}

// spendBatch applies up to spendMax hits. Sorted by shard with their
// order kept within each shard, they give what Spend would give in order:
// shards do not affect each other (each inserts, sweeps and evicts on its
// own).
func (t *Table) spendBatch(ns int64, hits []Hit) {
	var (
		hs     [spendMax]uint64
		order  [spendMax]uint16 // the hits to apply, grouped by shard
		counts [maxShards + 1]uint16
		apply  [spendMax]bool
		qis    [spendMax]uint16 // the policy index of a hit's stated limit; 0 for none
		qcs    [spendMax]*compiled
	)
	n := 0
	for j, h := range hits {
		if !spendable(h.Key, h.Count) {
			continue
		}
		if h.Quota.Burst != 0 && h.Quota.Check() == nil {
			// Interned before any shard's lock is taken (a full registry
			// looks through the shards for limits in use).
			if qi, c, err := t.quotas.intern(h.Quota, ns, t.usedQuotas); err == nil {
				qis[j], qcs[j] = uint16(qi), c
			}
		}
		hs[j] = hashString(t.seed, h.Key)
		apply[j] = true
		counts[hs[j]>>t.shift+1]++
		n++
	}
	// counts[i] becomes where shard i's hits start in order, then, once
	// placed, where they end.
	for i := 1; i <= len(t.shards); i++ {
		counts[i] += counts[i-1]
	}
	for j := range hits {
		if apply[j] {
			si := hs[j] >> t.shift
			order[counts[si]] = uint16(j)
			counts[si]++
		}
	}
	ahead := t.slots.Load() >= spendAheadSlots
	if ahead {
		for k := range min(slotAhead, n) {
			h := hs[order[k]]
			t.shards[h>>t.shift].index.prefetch(h)
		}
	}
	for k := 0; k < n; {
		si := hs[order[k]] >> t.shift
		s := &t.shards[si]
		end := int(counts[si])
		s.mu.Lock()
		at := s.advance(ns)
		for ; k < end; k++ {
			if ahead && k+slotAhead < n {
				h := hs[order[k+slotAhead]]
				t.shards[h>>t.shift].index.prefetch(h)
			}
			j := order[k]
			if qcs[j] != nil {
				s.spendQuota(at, hs[j], bytesOf(hits[j].Key), hits[j].Count, int(qis[j]), qcs[j])
				continue
			}
			s.spend(at, hs[j], bytesOf(hits[j].Key), hits[j].Count)
		}
		s.mu.Unlock()
	}
}
