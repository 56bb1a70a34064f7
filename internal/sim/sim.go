// Package sim is a cluster simulator: N dthrottle nodes behind a random
// load balancer, each with the real tag table (package bucket), reporting
// with the real wire encoder (package gossip), on a fake clock with a
// deterministic seed. It measures what a reporting design costs each node
// (bytes and datagrams sent and received, remote hits applied, the CPU
// time spent applying them) and how well it holds a rate (the served count
// of abusive clients against b + r*T and the cluster bound, and whether an
// ordinary client under its limit was ever refused).
//
// What a real node would not need to do twice is shared: a datagram is
// encoded once and decoded once, however many receive it; each receiver
// applies it to its own table.
package sim

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/dthrottle/dthrottle/bucket"
	"github.com/dthrottle/dthrottle/gossip"
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
	Sample      int // ordinary clients followed for refusals

	Rate     float64       // the policy: tokens per second
	Burst    int           // and burst
	Interval time.Duration // between a node's reports
	Step     time.Duration // the clock's resolution, and the delivery delay
}

// Default returns the standard load for n nodes: a million Zipf (s 1.1)
// clients, 100 ordinary requests per node per second, four abusive clients
// at 10x a limit of 10 per second with a burst of 20, reports every second.
func Default(n int) Config {
	return Config{
		Nodes: n, Design: "today", Duration: 20 * time.Second, Seed: 1,
		Clients: 1_000_000, ZipfS: 1.1, NodeRate: 100, Abusive: 4, AbuseFactor: 10, Sample: 200,
		Rate: 10, Burst: 20, Interval: time.Second, Step: 10 * time.Millisecond,
	}
}

// Designs names the reporting designs and says what each does.
var Designs = map[string]string{
	"today": "every node sends all its hits of the interval to every other node (multicast), each applies all",
	"owner": "each tag has an owner (a hash over the nodes): a node sends its hits of a tag to the tag's owner only; " +
		"the owner, whose bucket then counts every node's hits, sends the tags below half their burst, with their level, " +
		"back to the nodes that reported them, which take the lower bucket",
}

// Result is what a simulation measured. Per-node figures are per second
// of simulated time.
type Result struct {
	Config Config

	SentBytesMean, SentBytesMax           float64
	RecvBytesMean, RecvBytesMax           float64
	SentDatagramsMean, RecvDatagramsMean  float64
	RemoteHitsMean, RemoteHitsMax         float64
	ApplyCPUMean                          time.Duration // CPU time applying remote hits, per node per second
	AbusiveServedMax                      int           // the most served to one abusive client
	AbusiveRateRatio                      float64       // worst long-run served rate (second half) over Rate
	Ideal, Bound                          float64       // b + r*T, and the cluster bound
	BoundHeld                             bool
	OrdinaryRefusedUnderLimit             int // sampled ordinary clients under their limit that the cluster refused
	OrdinaryUnderLimit, OrdinaryOverLimit int // sampled clients that asked, by whether one bucket would have served them all
	Lost                                  int // (datagram, receiver) pairs lost
}

// node is one simulated dthrottled.
type node struct {
	table            *bucket.Table
	enc              gossip.Encoder
	drained          []bucket.Hit
	phase            time.Duration // when in the interval it reports
	sentBytes, sentN int
	recvBytes, recvN int
	remoteHits       int
	applyCPU         time.Duration
	// owner design: who reported which owned tag since the last update
	reporters map[string]map[int]bool
}

// datagram is one report as the receivers see it, decoded once. to is
// -1 for every other node (multicast), else the one receiver.
type datagram struct {
	from, to int
	bytes    int
	hits     []bucket.Hit
	levels   []bucket.Level
}

// Run simulates cfg.
func Run(cfg Config) (Result, error) {
	if _, ok := Designs[cfg.Design]; !ok {
		return Result{}, fmt.Errorf("sim: unknown design %q", cfg.Design)
	}
	if cfg.Nodes < 1 || cfg.Duration <= 0 || cfg.Step <= 0 || cfg.Interval < cfg.Step {
		return Result{}, fmt.Errorf("sim: bad config %+v", cfg)
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	zipf := rand.NewZipf(rng, cfg.ZipfS, 1, uint64(cfg.Clients-1))
	policy := bucket.Policy{Name: "default", Rate: cfg.Rate, Burst: cfg.Burst}
	nodes := make([]*node, cfg.Nodes)
	for i := range nodes {
		t, err := bucket.New(bucket.Config{Default: policy, MaxTags: 1 << 20, MaxTagBytes: 256})
		if err != nil {
			return Result{}, err
		}
		nodes[i] = &node{table: t, enc: gossip.Encoder{Node: uint64(i) + 1, MaxPacket: gossip.DefaultMaxPacket},
			phase: cfg.Interval * time.Duration(i) / time.Duration(cfg.Nodes), reporters: map[string]map[int]bool{}}
	}
	tags := make([][]byte, 0, 1024) // client rank -> tag, made as needed
	tag := func(rank int) []byte {
		for len(tags) <= rank {
			tags = append(tags, []byte("c"+strconv.Itoa(len(tags))))
		}
		return tags[rank]
	}
	abusive := make([][]byte, cfg.Abusive)
	abusiveServed := make([][]int, cfg.Abusive) // served per step
	for i := range abusive {
		abusive[i] = []byte("abuser" + strconv.Itoa(i))
	}
	// The sampled ordinary clients: ranks spread over the head and tail.
	sample := map[int]*follow{}
	for i := 0; i < cfg.Sample; i++ {
		rank := int(math.Pow(float64(cfg.Clients-1), float64(i)/float64(max(1, cfg.Sample-1))))
		sample[rank] = &follow{}
	}

	t0 := time.Unix(1_800_000_000, 0)
	steps := int(cfg.Duration / cfg.Step)
	ordinaryPerStep := cfg.NodeRate * float64(cfg.Nodes) * cfg.Step.Seconds()
	abusivePerStep := cfg.AbuseFactor * cfg.Rate * cfg.Step.Seconds()
	var due, abusiveDue float64
	var inFlight []datagram // sent this step, delivered at the next
	var res Result
	res.Config = cfg
	for s := 0; s < steps; s++ {
		now := t0.Add(time.Duration(s) * cfg.Step)
		// Deliver what was sent a step ago: the delivery delay is one step.
		for _, d := range inFlight {
			for j, n := range nodes {
				if j == d.from || (d.to >= 0 && j != d.to) {
					continue
				}
				if cfg.Loss > 0 && rng.Float64() < cfg.Loss {
					res.Lost++
					continue
				}
				n.recvBytes += d.bytes
				n.recvN++
				n.remoteHits += len(d.hits) + len(d.levels)
				start := time.Now()
				if len(d.hits) > 0 {
					n.table.SpendBatch(now, d.hits)
				}
				if len(d.levels) > 0 {
					n.table.Merge(now, 0, d.levels)
				}
				n.applyCPU += time.Since(start)
				if cfg.Design == "owner" && len(d.hits) > 0 {
					for _, h := range d.hits {
						r := n.reporters[h.Key]
						if r == nil {
							r = map[int]bool{}
							n.reporters[h.Key] = r
						}
						r[d.from] = true
					}
				}
			}
		}
		inFlight = inFlight[:0]

		// Ordinary requests, each to a node chosen at random.
		due += ordinaryPerStep
		for ; due >= 1; due-- {
			rank := int(zipf.Uint64())
			ok := nodes[rng.IntN(len(nodes))].table.Allow(now, tag(rank))
			if f := sample[rank]; f != nil {
				f.observe(now, ok, cfg.Rate, float64(cfg.Burst))
			}
		}
		abusiveDue += abusivePerStep
		for ; abusiveDue >= 1; abusiveDue-- {
			for i, a := range abusive {
				if len(abusiveServed[i]) <= s {
					abusiveServed[i] = append(abusiveServed[i], make([]int, s+1-len(abusiveServed[i]))...)
				}
				if nodes[rng.IntN(len(nodes))].table.Allow(now, a) {
					abusiveServed[i][s]++
				}
			}
		}

		// Reports: each node at its own phase of the interval.
		for i, n := range nodes {
			if time.Duration(s)*cfg.Step%cfg.Interval != n.phase/cfg.Step*cfg.Step {
				continue
			}
			n.drained = n.table.Drain(n.drained[:0])
			if cfg.Design == "owner" {
				inFlight = n.reportToOwners(i, now, len(nodes), inFlight, cfg)
				continue
			}
			inFlight = n.send(i, -1, now, n.drained, inFlight)
		}
	}

	secs := cfg.Duration.Seconds()
	var sent, recv, hits []float64
	var cpu time.Duration
	for _, n := range nodes {
		sent = append(sent, float64(n.sentBytes)/secs)
		recv = append(recv, float64(n.recvBytes)/secs)
		hits = append(hits, float64(n.remoteHits)/secs)
		res.SentDatagramsMean += float64(n.sentN) / secs / float64(len(nodes))
		res.RecvDatagramsMean += float64(n.recvN) / secs / float64(len(nodes))
		cpu += n.applyCPU
	}
	res.SentBytesMean, res.SentBytesMax = mean(sent), slices.Max(sent)
	res.RecvBytesMean, res.RecvBytesMax = mean(recv), slices.Max(recv)
	res.RemoteHitsMean, res.RemoteHitsMax = mean(hits), slices.Max(hits)
	res.ApplyCPUMean = time.Duration(float64(cpu) / float64(len(nodes)) / secs)

	b, r := float64(cfg.Burst), cfg.Rate
	res.Ideal = b + r*secs
	delay := cfg.Step.Seconds() * 2 // delivery, and the clock's resolution
	res.Bound = res.Ideal + float64(cfg.Nodes-1)*(b+r*(cfg.Interval.Seconds()+delay))
	res.BoundHeld = true
	half := steps / 2
	for i := range abusive {
		total, late := 0, 0
		for s, n := range abusiveServed[i] {
			total += n
			if s >= half {
				late += n
			}
		}
		res.AbusiveServedMax = max(res.AbusiveServedMax, total)
		ratio := float64(late) / (r * float64(steps-half) * cfg.Step.Seconds())
		res.AbusiveRateRatio = max(res.AbusiveRateRatio, ratio)
		if float64(total) > res.Bound {
			res.BoundHeld = false
		}
	}
	for _, f := range sample {
		if f.asked == 0 {
			continue
		}
		if f.idealRefused > 0 {
			res.OrdinaryOverLimit++
			continue
		}
		res.OrdinaryUnderLimit++
		if f.refused > 0 {
			res.OrdinaryRefusedUnderLimit++
		}
	}
	return res, nil
}

// send encodes hits with the real encoder as datagrams to node to (-1:
// every other node), decodes each once, and queues it.
func (n *node) send(from, to int, now time.Time, hits []bucket.Hit, out []datagram) []datagram {
	if len(hits) == 0 && to >= 0 {
		return out
	}
	gh := make([]gossip.Hit, len(hits))
	for k, h := range hits {
		gh[k] = gossip.Hit(h)
	}
	n.enc.Encode(now, gh, func(pkt []byte) error {
		m, err := gossip.Decode(pkt, nil)
		if err != nil {
			return err
		}
		d := datagram{from: from, to: to, bytes: len(pkt), hits: make([]bucket.Hit, len(m.Hits))}
		for k, h := range m.Hits {
			d.hits[k] = bucket.Hit(h)
		}
		n.sentBytes += len(pkt)
		n.sentN++
		out = append(out, d)
		return nil
	})
	return out
}

// reportToOwners is the owner design's report: the drained hits go to
// each tag's owner (its own tags stay here: its bucket already counts
// them), and for the tags it owns that were served or reported since its
// last report, those below half their burst go back, with their level, to
// the nodes that reported them.
func (n *node) reportToOwners(self int, now time.Time, nodes int, out []datagram, cfg Config) []datagram {
	byOwner := map[int][]bucket.Hit{}
	for _, h := range n.drained {
		o := owner(h.Key, nodes)
		if o == self {
			r := n.reporters[h.Key]
			if r == nil {
				n.reporters[h.Key] = map[int]bool{}
			}
			continue
		}
		byOwner[o] = append(byOwner[o], h)
	}
	for _, o := range slices.Sorted(maps.Keys(byOwner)) {
		out = n.send(self, o, now, byOwner[o], out)
	}
	updates := map[int][]bucket.Level{}
	for _, key := range slices.Sorted(maps.Keys(n.reporters)) {
		st, err := n.table.Peek(now, key)
		if err == nil && st.Tokens < float64(cfg.Burst)/2 {
			for to := range n.reporters[key] {
				updates[to] = append(updates[to], bucket.Level{Key: []byte(key), Tokens: st.Tokens})
			}
		}
	}
	clear(n.reporters)
	for _, to := range slices.Sorted(maps.Keys(updates)) {
		levels := updates[to]
		gl := make([]gossip.Level, len(levels))
		for k, l := range levels {
			gl[k] = gossip.Level(l)
		}
		for len(gl) > 0 {
			size := 0
			packed, _, _ := n.enc.EncodeSnapshot(now, uint64(to)+1, gl, true, func(pkt []byte) error {
				size = len(pkt)
				return nil
			})
			if packed == 0 {
				break
			}
			n.sentBytes += size
			n.sentN++
			d := datagram{from: self, to: to, bytes: size, levels: make([]bucket.Level, packed)}
			for k := range packed {
				d.levels[k] = bucket.Level(gl[k])
			}
			out = append(out, d)
			gl = gl[packed:]
		}
	}
	return out
}

// owner is the node that owns key: an FNV-1a hash over the nodes.
func owner(key string, nodes int) int {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	return int(h % uint64(nodes))
}

// follow is what a sampled ordinary client asked and got, beside what one
// bucket deciding every one of its requests would have answered: a client
// that bucket never refused was under its limit all along, and the
// cluster must not refuse it either.
type follow struct {
	asked, refused int // by the cluster
	idealRefused   int // by the one bucket
	tokens         float64
	last           time.Time
	started        bool
}

func (f *follow) observe(now time.Time, ok bool, rate, burst float64) {
	if !f.started {
		f.tokens, f.last, f.started = burst, now, true
	}
	f.tokens = min(burst, f.tokens+rate*now.Sub(f.last).Seconds())
	f.last = now
	f.asked++
	if f.tokens >= 1 {
		f.tokens--
	} else {
		f.idealRefused++
	}
	if !ok {
		f.refused++
	}
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// String is the result as one line of key=value fields.
func (r Result) String() string {
	c := r.Config
	return fmt.Sprintf("nodes=%d design=%s seconds=%g loss=%g seed=%d node_rate=%g "+
		"sent_bytes_per_node_per_s=%.0f sent_bytes_max=%.0f recv_bytes_per_node_per_s=%.0f recv_bytes_max=%.0f "+
		"sent_datagrams_per_node_per_s=%.1f recv_datagrams_per_node_per_s=%.1f "+
		"remote_hits_per_node_per_s=%.0f remote_hits_max=%.0f apply_cpu_us_per_node_per_s=%.1f "+
		"abusive_served_max=%d ideal=%.0f bound=%.0f abusive_rate_ratio=%.3f bound_held=%v "+
		"ordinary_under_limit=%d ordinary_refused_under_limit=%d lost=%d",
		c.Nodes, c.Design, c.Duration.Seconds(), c.Loss, c.Seed, c.NodeRate,
		r.SentBytesMean, r.SentBytesMax, r.RecvBytesMean, r.RecvBytesMax,
		r.SentDatagramsMean, r.RecvDatagramsMean,
		r.RemoteHitsMean, r.RemoteHitsMax, float64(r.ApplyCPUMean.Nanoseconds())/1000,
		r.AbusiveServedMax, r.Ideal, r.Bound, r.AbusiveRateRatio, r.BoundHeld,
		r.OrdinaryUnderLimit, r.OrdinaryRefusedUnderLimit, r.Lost)
}
