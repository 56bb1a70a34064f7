package main

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// tagLen is the length of every generated tag: about an IPv4 address.
const tagLen = 13

// appendTag appends tag number i of namespace ns: ns, then 12 decimal
// digits that look random. Distinct (ns, i), for i below 10^12, give
// distinct tags: the digits are i times a number coprime with 10^12,
// modulo 10^12.
func appendTag(b []byte, ns byte, i int) []byte {
	i = i * 2654435761 % 1e12
	var d [tagLen - 1]byte
	for k := len(d) - 1; k >= 0; k-- {
		d[k] = byte('0' + i%10)
		i /= 10
	}
	return append(append(b, ns), d[:]...)
}

// Proto is how requests are framed and replies counted.
type Proto interface {
	// Request appends the request for tag.
	Request(dst, tag []byte) []byte
	// Replies consumes complete replies at the start of b and returns the
	// bytes consumed and the replies seen, of which ok were OK answers;
	// an error reply is an error.
	Replies(b []byte) (consumed, replies, ok int, err error)
}

// lineProto is dthrottle's protocol (and the echo server's).
type lineProto struct{}

func (lineProto) Request(dst, tag []byte) []byte { return append(append(dst, tag...), '\n') }

func (lineProto) Replies(b []byte) (consumed, replies, ok int, err error) {
	for ; len(b)-consumed >= 3; consumed += 3 {
		r := b[consumed : consumed+3]
		switch string(r) {
		case "OK\n":
			ok++
		case "NO\n":
		default:
			return consumed, replies, ok, fmt.Errorf("unexpected reply %q", r)
		}
		replies++
	}
	return consumed, replies, ok, nil
}

// Load is one measurement: Conns connections, each keeping Depth requests
// in flight (written together, then all replies read), over Tags distinct
// tags of namespace NS, for Duration after Warmup.
type Load struct {
	Network, Addr string
	Proto         Proto
	Conns, Depth  int
	Tags          int
	NS            byte
	Warmup        time.Duration
	Duration      time.Duration
}

// Result is what a Load measured.
type Result struct {
	Queries  uint64        // replies received in the measured window
	OK       uint64        // of which OK
	Elapsed  time.Duration // the measured window
	P50, P99 time.Duration // round trip of one batch of Depth requests
	// Set by compare: CPU time per decision of the server and of the load
	// tool, warm-up included; 0 when unknown.
	ServerCPU, LoadCPU time.Duration
}

// Rate is the replies per second.
func (r Result) Rate() float64 { return float64(r.Queries) / r.Elapsed.Seconds() }

// stream builds the requests all connections cycle through: random
// permutations of the tags, one after another, at least minQueries long
// and a multiple of depth, so every tag is asked about equally often and
// in no order a cache could learn.
func stream(p Proto, ns byte, tags, depth, minQueries int, rng *rand.Rand) (buf []byte, offs []int) {
	n := max(tags, minQueries)
	n = (n + depth - 1) / depth * depth
	offs = make([]int, 0, n+1)
	var tag []byte
	for len(offs) < n {
		for _, i := range rng.Perm(tags) {
			if len(offs) == n {
				break
			}
			offs = append(offs, len(buf))
			tag = appendTag(tag[:0], ns, i)
			buf = p.Request(buf, tag)
		}
	}
	return buf, append(offs, len(buf))
}

// Run performs l and returns what it measured.
func (l Load) Run() (Result, error) {
	if l.Conns < 1 || l.Depth < 1 || l.Tags < 1 {
		return Result{}, errors.New("conns, depth and tags must be >= 1")
	}
	rng := rand.New(rand.NewPCG(uint64(l.Tags), uint64(l.NS)))
	buf, offs := stream(l.Proto, l.NS, l.Tags, l.Depth, 1<<16, rng)
	conns := make([]net.Conn, l.Conns)
	for i := range conns {
		c, err := net.Dial(l.Network, l.Addr)
		if err != nil {
			closeAll(conns)
			return Result{}, err
		}
		conns[i] = c
	}
	defer closeAll(conns)

	var measuring, stop atomic.Bool
	var wg sync.WaitGroup
	stats := make([]connStats, l.Conns)
	errs := make(chan error, l.Conns)
	batches := (len(offs) - 1) / l.Depth
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.drive(c, buf, offs, i*batches/l.Conns, &stats[i], &measuring, &stop); err != nil {
				errs <- err
				stop.Store(true)
			}
		}()
	}
	time.Sleep(l.Warmup)
	measuring.Store(true)
	start := time.Now()
	time.Sleep(l.Duration)
	measuring.Store(false)
	elapsed := time.Since(start)
	stop.Store(true)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return Result{}, err
	}
	var h histogram
	res := Result{Elapsed: elapsed}
	for i := range stats {
		res.Queries += stats[i].queries
		res.OK += stats[i].ok
		h.merge(&stats[i].rtt)
	}
	res.P50, res.P99 = h.quantile(0.50), h.quantile(0.99)
	return res, nil
}

// connStats are one connection's counts in the measured window.
type connStats struct {
	queries, ok uint64
	rtt         histogram
}

// drive sends batches of l.Depth requests from batch first on, reading
// every reply of a batch before sending the next, until stop.
func (l Load) drive(c net.Conn, buf []byte, offs []int, first int, st *connStats, measuring, stop *atomic.Bool) error {
	batches := (len(offs) - 1) / l.Depth
	in := make([]byte, 64<<10)
	b := first
	for !stop.Load() {
		req := buf[offs[b*l.Depth]:offs[(b+1)*l.Depth]]
		if b++; b == batches {
			b = 0
		}
		t0 := time.Now()
		if _, err := c.Write(req); err != nil {
			return fmt.Errorf("%s %s: write: %w", l.Network, l.Addr, err)
		}
		got, ok, n := 0, 0, 0
		for got < l.Depth {
			m, err := c.Read(in[n:])
			if m == 0 && err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return fmt.Errorf("%s %s: read: %w", l.Network, l.Addr, err)
			}
			n += m
			used, replies, oks, err := l.Proto.Replies(in[:n])
			if err != nil {
				return fmt.Errorf("%s %s: %w", l.Network, l.Addr, err)
			}
			got, ok = got+replies, ok+oks
			n = copy(in, in[used:n])
			if n == len(in) {
				return fmt.Errorf("%s %s: reply longer than %d bytes", l.Network, l.Addr, len(in))
			}
		}
		if got != l.Depth {
			return fmt.Errorf("%s %s: %d replies to %d requests", l.Network, l.Addr, got, l.Depth)
		}
		if measuring.Load() {
			st.rtt.add(time.Since(t0))
			st.queries += uint64(got)
			st.ok += uint64(ok)
		}
	}
	return nil
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
}

// Prefill asks once about every tag of namespace ns numbered from first to
// first+tags-1, over conns connections pipelining depth requests, so the
// tags are in the table before a measurement.
func Prefill(network, addr string, p Proto, ns byte, first, tags, conns, depth int) error {
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for c := 0; c < conns; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := prefillRange(network, addr, p, ns, first+c*tags/conns, first+(c+1)*tags/conns, depth); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func prefillRange(network, addr string, p Proto, ns byte, from, to, depth int) error {
	c, err := net.Dial(network, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	var req, tag []byte
	in := make([]byte, 64<<10)
	for i := from; i < to; {
		req = req[:0]
		n := 0
		for ; n < depth && i < to; n, i = n+1, i+1 {
			tag = appendTag(tag[:0], ns, i)
			req = p.Request(req, tag)
		}
		if _, err := c.Write(req); err != nil {
			return err
		}
		got, have := 0, 0
		for got < n {
			m, err := c.Read(in[have:])
			if m == 0 && err != nil {
				return fmt.Errorf("prefill: %w", err)
			}
			have += m
			used, replies, _, err := p.Replies(in[:have])
			if err != nil {
				return fmt.Errorf("prefill: %w", err)
			}
			got += replies
			have = copy(in, in[used:have])
		}
	}
	return nil
}

// splitAddr parses "unix:/path" or "tcp:host:port" (a bare path is Unix).
func splitAddr(s string) (network, addr string, err error) {
	switch {
	case strings.HasPrefix(s, "unix:"):
		return "unix", s[5:], nil
	case strings.HasPrefix(s, "tcp:"):
		return "tcp", s[4:], nil
	case strings.HasPrefix(s, "/"):
		return "unix", s, nil
	}
	return "", "", fmt.Errorf("address %q: want unix:/path or tcp:host:port", s)
}
