package sim

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Result is what a simulation measured. Per-node figures are per second
// of simulated time, the mean over the nodes and the most any node had.
type Result struct {
	Config Config

	SentBytesMean, SentBytesMax         float64
	RecvBytesMean, RecvBytesMax         float64
	SentDatagramsMean, SentDatagramsMax float64
	RecvDatagramsMean, RecvDatagramsMax float64
	RemoteHitsMean, RemoteHitsMax       float64 // tag entries applied to the table
	// CPUMean and CPUMax are the time spent handling reports per node per
	// second: receiving, subtracting, summing, encoding and sending.
	CPUMean, CPUMax time.Duration

	AbusiveServedMax int     // the most served to one abusive client over the run
	AbusiveRateRatio float64 // long-run served rate (second half) over Rate, the farthest from 1
	Ideal, Bound     float64 // b + r*T and the design's bound, over the whole run
	// AbusiveBoundUse and OrdinaryBoundUse are the largest share of the
	// bound (plus, for abusive clients, the hits lost) that a client
	// was served in any window of 1 s, 10 s or the whole run: at most 1
	// when the bound holds.
	AbusiveBoundUse, OrdinaryBoundUse float64
	BoundHeld                         bool // both shares at most 1

	OrdinaryRefusedUnderLimit             int // sampled ordinary clients under their limit that the cluster refused
	OrdinaryUnderLimit, OrdinaryOverLimit int // sampled clients that asked, by whether one bucket would have served them all
	// OrdinaryUnderMargin counts the sampled clients that one bucket with
	// the hold-back threshold less one taken off its burst would have
	// served in full: under their limit with that margin to spare.
	// OrdinaryRefusedUnderMargin counts those the cluster refused.
	OrdinaryUnderMargin, OrdinaryRefusedUnderMargin int

	Lost        int     // (datagram, receiver) pairs lost
	LostAbusive float64 // the most hits of one abusive client lost, summed over receivers
	Dropped     uint64  // held hits a relay dropped as too few to matter

	// OverLimit and OverHalf are the ordinary clients whose requests, over
	// the whole cluster, come faster than the rate and than half of it:
	// the clients any design must count across the cluster to hold them
	// to their limit. They grow with the cluster's load.
	OverLimit, OverHalf int

	follows map[int]*follow
}

// follow is what a sampled ordinary client asked and got, beside what one
// bucket deciding every one of its requests would have answered: a client
// that bucket never refused was under its limit all along, and the
// cluster must not refuse it either.
type follow struct {
	asked, refused int // by the cluster
	idealRefused   int // by the one bucket
	marginRefused  int // by the one bucket less the margin
	served         []int
	tokens, spare  float64 // of the one bucket, and of the one less the margin
	last           time.Time
	started        bool
}

// observe records a request at now and the cluster's answer. margin is
// taken off the burst of the second bucket.
func (f *follow) observe(now time.Time, step int, ok bool, rate, burst, margin float64) {
	if !f.started {
		f.tokens, f.spare, f.last, f.started = burst, burst-margin, now, true
	}
	dt := now.Sub(f.last).Seconds()
	f.tokens = min(burst, f.tokens+rate*dt)
	f.spare = min(burst-margin, f.spare+rate*dt)
	f.last = now
	f.asked++
	if f.tokens >= 1 {
		f.tokens--
	} else {
		f.idealRefused++
	}
	if f.spare >= 1 {
		f.spare--
	} else {
		f.marginRefused++
	}
	if ok {
		f.served = append(f.served, step)
	} else {
		f.refused++
	}
}

// windows are the window lengths the bound is checked over, in steps.
func (s *sim) windows(steps int) []int {
	var w []int
	for _, d := range []time.Duration{time.Second, 10 * time.Second} {
		if n := int(d / s.cfg.Step); n < steps {
			w = append(w, n)
		}
	}
	return append(w, steps)
}

// boundUse is the largest share of the bound (plus slack) served in any
// window, given the steps at which hits were served, in order.
func (s *sim) boundUse(served []int, steps int, slack float64) float64 {
	use := 0.0
	for _, w := range s.windows(steps) {
		got := maxInWindow(served, w)
		use = max(use, float64(got)/(Bound(s.cfg, time.Duration(w)*s.cfg.Step)+slack))
	}
	return use
}

// maxInWindow is the most hits served within any w consecutive steps.
func maxInWindow(served []int, w int) int {
	best, j := 0, 0
	for i := range served {
		for served[i]-served[j] >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

func (s *sim) result(abusiveServed [][]int, sample map[int]*follow) Result {
	cfg := s.cfg
	res := Result{Config: cfg, Lost: s.lost, follows: sample,
		OverLimit: clientsOver(cfg, cfg.Rate), OverHalf: clientsOver(cfg, cfg.Rate/2)}
	secs := cfg.Duration.Seconds()
	var sent, recv, sentN, recvN, hits, cpu []float64
	for _, n := range s.nodes {
		sent = append(sent, float64(n.sentBytes)/secs)
		recv = append(recv, float64(n.recvBytes)/secs)
		sentN = append(sentN, float64(n.sentN)/secs)
		recvN = append(recvN, float64(n.recvN)/secs)
		hits = append(hits, float64(n.remote)/secs)
		cpu = append(cpu, float64(n.cpu)/secs)
	}
	res.SentBytesMean, res.SentBytesMax = mean(sent), slices.Max(sent)
	res.RecvBytesMean, res.RecvBytesMax = mean(recv), slices.Max(recv)
	res.SentDatagramsMean, res.SentDatagramsMax = mean(sentN), slices.Max(sentN)
	res.RecvDatagramsMean, res.RecvDatagramsMax = mean(recvN), slices.Max(recvN)
	res.RemoteHitsMean, res.RemoteHitsMax = mean(hits), slices.Max(hits)
	res.CPUMean, res.CPUMax = time.Duration(mean(cpu)), time.Duration(slices.Max(cpu))
	if r, ok := s.design.(*relay); ok {
		res.Dropped = r.dropped()
	}

	steps := int(cfg.Duration / cfg.Step)
	res.Ideal = float64(cfg.Burst) + cfg.Rate*secs
	res.Bound = Bound(cfg, cfg.Duration)
	half := steps / 2
	res.AbusiveRateRatio = 1
	for i, perStep := range abusiveServed {
		var served []int
		late := 0
		for st, n := range perStep {
			for range n {
				served = append(served, st)
			}
			if st >= half {
				late += n
			}
		}
		res.AbusiveServedMax = max(res.AbusiveServedMax, len(served))
		ratio := float64(late) / (cfg.Rate * float64(steps-half) * cfg.Step.Seconds())
		if math.Abs(ratio-1) > math.Abs(res.AbusiveRateRatio-1) {
			res.AbusiveRateRatio = ratio
		}
		res.LostAbusive = max(res.LostAbusive, s.lostAbusive[i])
		res.AbusiveBoundUse = max(res.AbusiveBoundUse, s.boundUse(served, steps, s.lostAbusive[i]))
	}
	for _, f := range sample {
		if f.asked == 0 {
			continue
		}
		res.OrdinaryBoundUse = max(res.OrdinaryBoundUse, s.boundUse(f.served, steps, 0))
		if f.marginRefused == 0 {
			res.OrdinaryUnderMargin++
			if f.refused > 0 {
				res.OrdinaryRefusedUnderMargin++
			}
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
	res.BoundHeld = res.AbusiveBoundUse <= 1 && res.OrdinaryBoundUse <= 1
	return res
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
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
	return fmt.Sprintf("nodes=%d design=%s seconds=%g loss=%g seed=%d node_rate=%g relays=%d hold=%g threshold=%d hold_age_s=%g "+
		"sent_bytes_per_node_per_s=%.0f sent_bytes_max=%.0f recv_bytes_per_node_per_s=%.0f recv_bytes_max=%.0f "+
		"sent_datagrams_per_node_per_s=%.1f sent_datagrams_max=%.1f recv_datagrams_per_node_per_s=%.1f recv_datagrams_max=%.1f "+
		"remote_hits_per_node_per_s=%.0f remote_hits_max=%.0f report_cpu_us_per_node_per_s=%.1f report_cpu_us_max=%.1f "+
		"abusive_served_max=%d ideal=%.0f bound=%.0f abusive_rate_ratio=%.3f abusive_bound_use=%.3f ordinary_bound_use=%.3f "+
		"bound_held=%v ordinary_under_limit=%d ordinary_over_limit=%d ordinary_refused_under_limit=%d ordinary_under_margin=%d ordinary_refused_under_margin=%d "+
		"lost=%d lost_abusive_hits=%.0f dropped_held_hits=%d over_limit_clients=%d over_half_limit_clients=%d",
		c.Nodes, c.Design, c.Duration.Seconds(), c.Loss, c.Seed, c.NodeRate, c.Relays, c.Hold, c.threshold(), c.holdAge().Seconds(),
		r.SentBytesMean, r.SentBytesMax, r.RecvBytesMean, r.RecvBytesMax,
		r.SentDatagramsMean, r.SentDatagramsMax, r.RecvDatagramsMean, r.RecvDatagramsMax,
		r.RemoteHitsMean, r.RemoteHitsMax, us(r.CPUMean), us(r.CPUMax),
		r.AbusiveServedMax, r.Ideal, r.Bound, r.AbusiveRateRatio, r.AbusiveBoundUse, r.OrdinaryBoundUse,
		r.BoundHeld, r.OrdinaryUnderLimit, r.OrdinaryOverLimit, r.OrdinaryRefusedUnderLimit, r.OrdinaryUnderMargin, r.OrdinaryRefusedUnderMargin,
		r.Lost, r.LostAbusive, r.Dropped, r.OverLimit, r.OverHalf)
}

// clientsOver counts the ordinary clients whose mean request rate over
// the cluster exceeds rate: rank k asks with probability (1+k)^-s / H,
// the law rand.NewZipf draws from.
func clientsOver(cfg Config, rate float64) int {
	var h float64
	for k := cfg.Clients - 1; k >= 0; k-- {
		h += math.Pow(float64(1+k), -cfg.ZipfS)
	}
	total := cfg.NodeRate * float64(cfg.Nodes)
	n := 0
	for k := 0; k < cfg.Clients && total*math.Pow(float64(1+k), -cfg.ZipfS)/h > rate; k++ {
		n++
	}
	return n
}
