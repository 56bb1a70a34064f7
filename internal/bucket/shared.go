package bucket

import (
	"encoding/binary"
	"math"
	"os"
	"sync/atomic"
	"time"
)

// This file is the table's side of sharing: what the daemon writes into
// the table file for processes deciding in process (policies, heartbeat,
// state), what it takes back from the state file (their counts; their
// hits and refusals are drain.go's), and the files it hands out.
// docs/shared-table.md is the layout.

// SharedFiles returns the table file and the state file, for handing to
// processes that decide from the table, or nils for a table not made
// Shared. The files stay the table's: do not close them.
func (t *Table) SharedFiles() (table, state *os.File) { return t.reg.roFile, t.reg.rwFile }

// Beat tells processes deciding from the table that the daemon still
// keeps it: one who sees no beat for a second stops deciding from it.
func (t *Table) Beat(now time.Time) {
	atomic.StoreUint64(t.reg.u64(hdrHeartbeat), uint64(now.UnixNano()))
}

// Retire tells processes deciding from the table that the daemon left
// it: they attach again.
func (t *Table) Retire() { t.reg.setState(stateRetired) }

// setMaxKey publishes the longest tag kept verbatim.
func (r *region) setMaxKey(n int) { atomic.StoreUint32(r.u32(hdrMaxKey), uint32(n)) }

// writePolicies writes set into the policy block not in force and puts it
// in force, under the policy sequence (odd while it changes). A set too
// large for a block sends every process to ask instead, until a set that
// fits puts the table back to live.
func (r *region) writePolicies(set policySet) {
	x := set[0].index
	names := 0
	for i := range set {
		names += 2 + min(len(set[i].Name), maxPolicyName)
	}
	size := 16 + 32*len(set) + 8*len(x.nodes) + 8*len(x.edges) + names
	if size > policyBlockMax {
		r.setState(stateAsking)
		return
	}
	defer atomic.CompareAndSwapUint32(r.u32(hdrState), stateAsking, stateLive)
	seq := r.u32(hdrPolicySeq)
	atomic.AddUint32(seq, 1)
	off := r.policyBlocks[r.policyNext]
	r.policyNext = 1 - r.policyNext
	b := r.ro[off : off+uint64(size)]
	le := binary.LittleEndian
	le.PutUint32(b[0:], uint32(len(set)))
	le.PutUint32(b[4:], uint32(len(x.nodes)))
	le.PutUint32(b[8:], uint32(len(x.edges)))
	le.PutUint32(b[12:], uint32(names))
	p := b[16:]
	for i := range set {
		c := &set[i]
		clear(p[:32])
		p[0] = byte(c.Action)
		if c.DryRun {
			p[1] = 1
		}
		le.PutUint32(p[4:], uint32(max(c.Burst, 0)))
		le.PutUint64(p[8:], uint64(c.perToken))
		le.PutUint64(p[16:], uint64(c.allowAt))
		le.PutUint64(p[24:], math.Float64bits(c.Rate))
		p = p[32:]
	}
	for _, n := range x.nodes {
		le.PutUint32(p[0:], n.first)
		le.PutUint16(p[4:], n.n)
		le.PutUint16(p[6:], n.policy)
		p = p[8:]
	}
	for _, e := range x.edges {
		le.PutUint32(p[0:], uint32(e.b))
		le.PutUint32(p[4:], e.next)
		p = p[8:]
	}
	for i := range set {
		name := set[i].Name[:min(len(set[i].Name), maxPolicyName)]
		le.PutUint16(p, uint16(len(name)))
		p = p[2+copy(p[2:], name):]
	}
	atomic.StoreUint64(r.u64(hdrPolicyActive), off)
	atomic.AddUint32(seq, 1)
}

// counted returns the queries answered in process under policy pi and
// counted in stripe si.
func (r *region) counted(si, pi int) (ok, no, dry uint64) {
	c := r.counter(si, pi)
	return atomic.LoadUint64(&c[0]), atomic.LoadUint64(&c[1]), atomic.LoadUint64(&c[2])
}

// foldShared moves the counts made in process under the policies of old
// into those policies' totals, before a reload renumbers the policies.
func (t *Table) foldShared(old policySet) {
	for si := range counterStripes {
		for pi := 0; pi < len(old) && pi < countedPolicies; pi++ {
			c := t.reg.counter(si, pi)
			ok, no, dry := atomic.SwapUint64(&c[0], 0), atomic.SwapUint64(&c[1], 0), atomic.SwapUint64(&c[2], 0)
			old[pi].counts.ok.Add(ok)
			old[pi].counts.no.Add(no)
			if dry != 0 {
				old[pi].counts.stripe().dry.Add(dry)
			}
		}
	}
}
