// Package sim is a cluster simulator: N dthrottle nodes behind a random
// load balancer, each with the real tag table (package bucket), reporting
// with the real wire encoder (package gossip), on a fake clock with a
// deterministic seed. It runs one reporting design at a time (Designs
// lists them) and measures what it costs each node (bytes and datagrams
// sent and received, remote hits applied, the time spent handling
// reports) and how well it holds a rate (the served count of abusive
// clients and of a sample of ordinary ones against b + r*T and against
// the design's cluster bound over several windows, and whether an
// ordinary client under its limit was ever refused).
//
// What a real node would not need to do twice is shared: a datagram is
// encoded once and decoded once, however many receive it; each receiver
// applies it to its own table.
package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/gossip/wire"
)

// Config is one simulation. The zero value is not usable: see Default.
type Config struct {
	Nodes    int           // N
	Design   string        // a name Designs lists
	Duration time.Duration // simulated time
	Seed     uint64        // every random choice follows from it
	Loss     float64       // probability that a receiver misses a datagram

	Clients     int     // distinct ordinary clients
	ZipfS       float64 // their requests follow a Zipf law of exponent s
	NodeRate    float64 // ordinary requests per node per second
	Abusive     int     // clients sending at AbuseFactor times their rate
	AbuseFactor float64
	Sample      int // ordinary clients followed for refusals and served counts

	Rate     float64       // the policy: tokens per second
	Burst    int           // and burst
	Interval time.Duration // between a node's reports
	Step     time.Duration // the clock's resolution, and the delivery delay

	// Relays is the number of relays in the segment, for the relay
	// designs; at least 2.
	Relays int
	// Hold is the hold-back threshold as a fraction of the burst: a tag's
	// hits are held until they reach ceil(Hold*Burst), for the holding
	// designs. In (0, 1].
	Hold float64
	// RelayFail, when set, is when every relay falls silent; the nodes
	// then send directly.
	RelayFail time.Duration
	// HotAges is how many hold ages a tag stays hot (sent by the relay
	// at every aggregate, however few its hits) once it reached the
	// threshold in one aggregate, or kept up half its rate since.
	HotAges int
	// RelayEvery is how often a relay sends its aggregate; zero means
	// every Interval.
	RelayEvery time.Duration
}

// Default returns the standard load for n nodes: a million Zipf (s 1.1)
// clients, 100 ordinary requests per node per second, four abusive clients
// at 10x a limit of 10 per second with a burst of 20, reports every second,
// two relays, a hold-back threshold of half the burst, tags hot for two
// hold ages.
func Default(n int) Config {
	return Config{
		Nodes: n, Design: "today", Duration: 20 * time.Second, Seed: 1,
		Clients: 1_000_000, ZipfS: 1.1, NodeRate: 100, Abusive: 4, AbuseFactor: 10, Sample: 200,
		Rate: 10, Burst: 20, Interval: time.Second, Step: 10 * time.Millisecond,
		Relays: 2, Hold: 0.5, HotAges: 2,
	}
}

// node is one simulated dthrottled.
type node struct {
	table     *bucket.Table
	enc       wire.Encoder
	drained   []bucket.Hit
	phase     int // the step within the interval at which it reports
	sentBytes int
	sentN     int
	recvBytes int
	recvN     int
	remote    int           // remote hit entries applied
	cpu       time.Duration // handling reports: receiving, aggregating, sending
}

// Datagram kinds.
const (
	kindReport  = iota // a node's hits, to every peer or to a relay
	kindForward        // a relay's aggregate, to every node
	kindLevels         // an owner's levels of the tags a node reported
)

// datagram is one datagram as its receivers see it, decoded once.
type datagram struct {
	kind    int
	from    int
	to      int // a node, or -1 for every node but the sender
	bytes   int
	hits    []bucket.Hit
	levels  []bucket.Level
	abusive []uint32 // hits of each abusive client it carries
}

// sim is one run in progress.
type sim struct {
	cfg      Config
	rng      *rand.Rand
	nodes    []*node
	design   design
	t0       time.Time
	step     int
	inFlight []*datagram
	sending  []*datagram

	abusiveIdx  map[string]int // key of an abusive client -> its index
	lostAbusive []float64      // per abusive client: hits lost, summed over receivers
	lost        int            // (datagram, receiver) pairs lost
}

// Run simulates cfg.
func Run(cfg Config) (Result, error) {
	mk, ok := designs[cfg.Design]
	if !ok {
		return Result{}, fmt.Errorf("sim: unknown design %q (try help)", cfg.Design)
	}
	if cfg.Nodes < 1 || cfg.Duration <= 0 || cfg.Step <= 0 || cfg.Interval < cfg.Step || cfg.Clients < 2 {
		return Result{}, fmt.Errorf("sim: bad config %+v", cfg)
	}
	if cfg.Relays < 2 || !(cfg.Hold > 0 && cfg.Hold <= 1) || cfg.HotAges < 1 {
		return Result{}, fmt.Errorf("sim: relays must be >= 2, hold in (0, 1] and hot ages >= 1, got %d, %v and %d", cfg.Relays, cfg.Hold, cfg.HotAges)
	}
	s := &sim{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		t0: time.Unix(1_800_000_000, 0), abusiveIdx: map[string]int{}, lostAbusive: make([]float64, cfg.Abusive)}
	policy := bucket.Policy{Name: "default", Rate: cfg.Rate, Burst: cfg.Burst}
	stepsPerInterval := int(cfg.Interval / cfg.Step)
	s.nodes = make([]*node, cfg.Nodes)
	for i := range s.nodes {
		t, err := bucket.New(bucket.Config{Default: policy, MaxTags: 1 << 20, MaxTagBytes: 256})
		if err != nil {
			return Result{}, err
		}
		s.nodes[i] = &node{table: t, enc: wire.Encoder{Node: uint64(i) + 1, MaxPacket: config.Default().Gossip.MaxPacket},
			phase: i * stepsPerInterval / cfg.Nodes}
	}
	if s.cfg.RelayEvery <= 0 {
		s.cfg.RelayEvery = cfg.Interval
	}
	s.design = mk(s)
	return s.run(), nil
}

// ticker is a design with something to do at every step.
type ticker interface{ tick(step int, now time.Time) }

// now is the fake clock.
func (s *sim) now() time.Time { return s.t0.Add(time.Duration(s.step) * s.cfg.Step) }

func (s *sim) run() Result {
	cfg := s.cfg
	zipf := rand.NewZipf(s.rng, cfg.ZipfS, 1, uint64(cfg.Clients-1))
	tags := make([][]byte, 0, 1024) // client rank -> tag, made as needed
	tag := func(rank int) []byte {
		for len(tags) <= rank {
			tags = append(tags, []byte("c"+strconv.Itoa(len(tags))))
		}
		return tags[rank]
	}
	steps := int(cfg.Duration / cfg.Step)
	abusive := make([][]byte, cfg.Abusive)
	abusiveServed := make([][]int, cfg.Abusive) // served per step
	for i := range abusive {
		abusive[i] = []byte("abuser" + strconv.Itoa(i))
		s.abusiveIdx[string(abusive[i])] = i
		abusiveServed[i] = make([]int, steps)
	}
	// The sampled ordinary clients: ranks spread over the head and tail.
	sample := map[int]*follow{}
	for i := 0; i < cfg.Sample; i++ {
		rank := int(math.Pow(float64(cfg.Clients-1), float64(i)/float64(max(1, cfg.Sample-1))))
		sample[rank] = &follow{}
	}
	stepsPerInterval := int(cfg.Interval / cfg.Step)
	ordinaryPerStep := cfg.NodeRate * float64(cfg.Nodes) * cfg.Step.Seconds()
	abusivePerStep := cfg.AbuseFactor * cfg.Rate * cfg.Step.Seconds()
	var due, abusiveDue float64
	for s.step = 0; s.step < steps; s.step++ {
		now := s.now()
		if cfg.RelayFail > 0 && time.Duration(s.step)*cfg.Step == cfg.RelayFail {
			s.design.fail()
		}
		s.deliver(now)

		// Ordinary requests, each to a node chosen at random.
		due += ordinaryPerStep
		for ; due >= 1; due-- {
			rank := int(zipf.Uint64())
			ok := s.nodes[s.rng.IntN(len(s.nodes))].table.Allow(now, tag(rank))
			if f := sample[rank]; f != nil {
				f.observe(now, s.step, ok, cfg.Rate, float64(cfg.Burst), float64(cfg.threshold()-1))
			}
		}
		abusiveDue += abusivePerStep
		for ; abusiveDue >= 1; abusiveDue-- {
			for i, a := range abusive {
				if s.nodes[s.rng.IntN(len(s.nodes))].table.Allow(now, a) {
					abusiveServed[i][s.step]++
				}
			}
		}

		// Reports: each node at its own phase of the interval.
		for i, n := range s.nodes {
			if s.step%stepsPerInterval == n.phase {
				start := time.Now()
				s.design.report(i, now)
				n.cpu += time.Since(start)
			}
		}
		if t, ok := s.design.(ticker); ok {
			t.tick(s.step, now)
		}
		// What was sent this step arrives at the next: the delivery delay
		// is one step.
		s.inFlight, s.sending = s.sending, s.inFlight[:0]
	}
	return s.result(abusiveServed, sample)
}

// deliver hands every datagram in flight to its receivers.
func (s *sim) deliver(now time.Time) {
	for _, d := range s.inFlight {
		if d.to >= 0 {
			s.receive(d.to, d, now)
			continue
		}
		for j := range s.nodes {
			if j != d.from {
				s.receive(j, d, now)
			}
		}
	}
}

// receive hands d to node j, unless the network loses it.
func (s *sim) receive(j int, d *datagram, now time.Time) {
	if s.cfg.Loss > 0 && s.rng.Float64() < s.cfg.Loss {
		if d.to >= 0 && d.kind == kindReport {
			// Hits sent to one node to pass on (a relay, an owner) are
			// lost to all.
			s.lose(d, len(s.nodes))
		} else {
			s.lose(d, 1)
		}
		return
	}
	n := s.nodes[j]
	n.recvBytes += d.bytes
	n.recvN++
	start := time.Now()
	s.design.receive(j, d, now)
	n.cpu += time.Since(start)
}

// lose counts d as lost to receivers receivers.
func (s *sim) lose(d *datagram, receivers int) {
	s.lost += receivers
	for i, h := range d.abusive {
		s.lostAbusive[i] += float64(h) * float64(receivers)
	}
}

// drain returns node i's hits since its last drain, in a slice reused
// by the next call.
func (s *sim) drain(i int) []bucket.Hit {
	n := s.nodes[i]
	n.drained = n.table.Drain(n.drained[:0])
	return n.drained
}

// send encodes hits from node from with its encoder, as a real node
// would, and puts the datagrams in flight to node to (-1: every other
// node). An empty report is a heartbeat.
func (s *sim) send(from, to, kind int, hits []bucket.Hit) {
	n := s.nodes[from]
	n.enc.Encode(s.now(), hits, func(pkt []byte) error {
		m, err := wire.Decode(pkt, nil)
		if err != nil {
			panic(fmt.Sprintf("sim: the encoder wrote what the decoder refuses: %v", err))
		}
		d := &datagram{kind: kind, from: from, to: to, bytes: len(pkt), hits: make([]bucket.Hit, len(m.Hits))}
		for k, h := range m.Hits {
			d.hits[k] = h
			if a, ok := s.abusiveIdx[h.Key]; ok {
				if d.abusive == nil {
					d.abusive = make([]uint32, s.cfg.Abusive)
				}
				d.abusive[a] += h.Count
			}
		}
		n.sentBytes += len(pkt)
		n.sentN++
		s.sending = append(s.sending, d)
		return nil
	})
}
