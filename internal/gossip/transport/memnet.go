package transport

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// memBuffer is the capacity of each MemTransport's Packets channel.
const memBuffer = 1 << 16

// MemConfig sets the faults of a MemNetwork. The zero value is a perfect
// network: nothing lost, duplicated or delayed.
type MemConfig struct {
	Loss      float64       // probability a datagram is dropped, drawn per receiver
	Duplicate float64       // probability a datagram is delivered twice, drawn per receiver
	Delay     time.Duration // base delivery delay
	Jitter    time.Duration // extra uniform random delay in [0, Jitter); reorders datagrams
	Seed      int64         // seeds the random faults; the same seed and calls give the same run
}

// MemStats counts what a MemNetwork did with datagrams. Sent counts Send
// calls; the others count datagram copies, one per receiver.
type MemStats struct {
	Sent        uint64 // Send calls on open transports
	Delivered   uint64 // copies put into a receiver's Packets channel
	Dropped     uint64 // copies lost to MemConfig.Loss
	Duplicated  uint64 // extra copies made by MemConfig.Duplicate
	Partitioned uint64 // copies not sent because a partition separates the nodes
	Overflow    uint64 // copies dropped because the receiver's channel was full
}

// MemNetwork is an in-memory network for deterministic tests. Nodes Join
// it by name; a datagram sent by one is queued for every other node, with
// the configured loss, duplication, delay and jitter, and reaches them only
// when the test calls Deliver with a time at or past its due time. Nothing
// happens in the background, so a test on a fake clock fully controls what
// arrives when.
//
// A MemNetwork is safe for concurrent use. Create it with NewMemNetwork;
// the zero value is not usable.
type MemNetwork struct {
	now func() time.Time

	mu        sync.Mutex
	cfg       MemConfig
	rng       *rand.Rand
	nodes     []*MemTransport // open transports, in join order
	partition map[string]int  // node name -> group; nil when healed
	queue     memQueue        // datagram copies in flight
	seq       uint64          // send order of queued copies, breaks ties
	stats     MemStats
	onTime    bool // each send arms a timer that delivers at the due time
}

// NewMemNetwork returns an empty network with the faults in cfg. now gives
// the send time of each datagram (its due time is that plus delay and
// jitter); it is usually the test's fake clock. A nil now means time.Now.
func NewMemNetwork(cfg MemConfig, now func() time.Time) *MemNetwork {
	if now == nil {
		now = time.Now
	}
	return &MemNetwork{
		now: now,
		cfg: cfg,
		rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x9e3779b97f4a7c15)),
	}
}

// SetConfig changes the faults for datagrams sent from now on; those in
// flight keep their due times. The random source keeps its state, so
// cfg.Seed is ignored.
func (n *MemNetwork) SetConfig(cfg MemConfig) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cfg = cfg
}

// DeliverOnTime makes the network deliver by itself from now on: every
// datagram sent arms a timer (time.AfterFunc) that calls Deliver at its
// due time, so datagrams arrive as the clock passes their due time with
// no test calling Deliver. Inside a testing/synctest bubble those timers
// run on the bubble's fake clock, and whole daemons gossip on fake time.
// The network's now must then be the clock the timers run on: time.Now,
// or nil. Deliver may still be called; it delivers what is due sooner.
func (n *MemNetwork) DeliverOnTime() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.onTime = true
}

// Join adds a node called name and returns its transport: its Send goes to
// every other joined node, and it receives what they send. Names must be
// unique among open transports; a closed transport's name may be joined
// again. Join panics on a name already in use.
func (n *MemNetwork) Join(name string) *MemTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, t := range n.nodes {
		if t.name == name {
			panic(fmt.Sprintf("transport: node %q already joined the network", name))
		}
	}
	t := &MemTransport{network: n, name: name, ch: make(chan Packet, memBuffer)}
	n.nodes = append(n.nodes, t)
	return t
}

// Partition splits the network: from now on a datagram is queued only for
// nodes in the same group as its sender, and a node in no group hears
// nobody. Datagrams already in flight are not affected. Partition() with no
// groups heals the network.
func (n *MemNetwork) Partition(groups ...[]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(groups) == 0 {
		n.partition = nil
		return
	}
	n.partition = make(map[string]int)
	for i, g := range groups {
		for _, name := range g {
			n.partition[name] = i
		}
	}
}

// reachable reports whether a datagram from one node may reach another
// under the current partition. It is called with n.mu held.
func (n *MemNetwork) reachable(from, to string) bool {
	if n.partition == nil {
		return true
	}
	gf, ok1 := n.partition[from]
	gt, ok2 := n.partition[to]
	return ok1 && ok2 && gf == gt
}

// send queues b for every node but the sender, or only for the node
// named only when it is not "".
func (n *MemNetwork) send(from *MemTransport, b []byte, only string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var due []time.Time
	if n.onTime {
		defer func() { n.arm(due) }()
	}
	if from.closed {
		return fmt.Errorf("transport: send from %s: %w", from.name, net.ErrClosed)
	}
	n.stats.Sent++
	sent := n.now()
	data := append([]byte(nil), b...) // shared by the copies; each receiver gets its own at delivery
	for _, to := range n.nodes {
		if to == from || (only != "" && to.name != only) {
			continue
		}
		if !n.reachable(from.name, to.name) {
			n.stats.Partitioned++
			continue
		}
		if n.cfg.Loss > 0 && n.rng.Float64() < n.cfg.Loss {
			n.stats.Dropped++
			continue
		}
		copies := 1
		if n.cfg.Duplicate > 0 && n.rng.Float64() < n.cfg.Duplicate {
			copies = 2
			n.stats.Duplicated++
		}
		for range copies {
			at := sent.Add(n.cfg.Delay)
			if n.cfg.Jitter > 0 {
				at = at.Add(time.Duration(n.rng.Int64N(int64(n.cfg.Jitter))))
			}
			n.seq++
			heap.Push(&n.queue, memDatagram{due: at, seq: n.seq, from: from.name, to: to, data: data})
			due = append(due, at)
		}
	}
	return nil
}

// arm starts a timer for each distinct due time, which delivers what is
// due then. It is called with n.mu held; the timers take it themselves.
func (n *MemNetwork) arm(due []time.Time) {
	now := n.now()
	for i, at := range due {
		if i > 0 && at.Equal(due[i-1]) {
			continue
		}
		time.AfterFunc(at.Sub(now), func() { n.Deliver(n.now()) })
	}
}

// Deliver moves every datagram due at or before now into its receiver's
// Packets channel, earliest due first and, among equal due times, in send
// order, and returns how many it delivered. Packet.At is the due time.
// Given the same seed, the same calls in the same order deliver the same
// packets at the same times.
// Copies for a receiver closed since the send are discarded; a receiver
// whose channel is full loses the copy, counted as Overflow.
func (n *MemNetwork) Deliver(now time.Time) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	delivered := 0
	for len(n.queue) > 0 && !n.queue[0].due.After(now) {
		d := heap.Pop(&n.queue).(memDatagram)
		if d.to.closed {
			continue
		}
		p := Packet{Data: append([]byte(nil), d.data...), From: d.from, At: d.due}
		select {
		case d.to.ch <- p:
			delivered++
			n.stats.Delivered++
		default:
			n.stats.Overflow++
		}
	}
	return delivered
}

// Pending returns how many datagram copies are in flight, waiting for
// Deliver.
func (n *MemNetwork) Pending() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.queue)
}

// Stats returns the network's counters so far.
func (n *MemNetwork) Stats() MemStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// MemTransport is one node's Transport on a MemNetwork, returned by Join.
// It is safe for concurrent use; the zero value is not usable.
type MemTransport struct {
	network *MemNetwork
	name    string
	ch      chan Packet
	closed  bool // guarded by network.mu
}

// Name returns the name the node joined with, which is Packet.From on the
// datagrams it sends.
func (t *MemTransport) Name() string { return t.name }

// Send queues a copy of b for every other node on the network; it does
// not retain b. Nothing arrives until the network's Deliver.
func (t *MemTransport) Send(b []byte) error { return t.network.send(t, b, "") }

// Packets returns the channel Deliver fills. It is closed by Close.
func (t *MemTransport) Packets() <-chan Packet { return t.ch }

// Close leaves the network and closes the Packets channel; datagrams still
// in flight to this node are discarded. Calling it again does nothing.
func (t *MemTransport) Close() error {
	n := t.network
	n.mu.Lock()
	defer n.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	close(t.ch)
	for i, o := range n.nodes {
		if o == t {
			n.nodes = append(n.nodes[:i], n.nodes[i+1:]...)
			break
		}
	}
	return nil
}

// memDatagram is one copy of a datagram in flight to one receiver.
type memDatagram struct {
	due  time.Time
	seq  uint64 // send order, to break ties between equal due times
	from string
	to   *MemTransport
	data []byte // shared between the copies of one Send; never modified
}

// memQueue is a min-heap of datagrams by (due, seq).
type memQueue []memDatagram

func (q memQueue) Len() int { return len(q) }
func (q memQueue) Less(i, j int) bool {
	if !q[i].due.Equal(q[j].due) {
		return q[i].due.Before(q[j].due)
	}
	return q[i].seq < q[j].seq
}
func (q memQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *memQueue) Push(x any)   { *q = append(*q, x.(memDatagram)) }
func (q *memQueue) Pop() any {
	old := *q
	d := old[len(old)-1]
	old[len(old)-1] = memDatagram{}
	*q = old[:len(old)-1]
	return d
}
