package transport

import (
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
)

var memT0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// drain returns what is waiting in t's Packets channel without blocking.
func drain(t *MemTransport) []Packet {
	var ps []Packet
	for {
		select {
		case p := <-t.Packets():
			ps = append(ps, p)
		default:
			return ps
		}
	}
}

func payloads(ps []Packet) []string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = string(p.Data)
	}
	return s
}

func TestMemDeliversToAllButSender(t *testing.T) {
	clk := testkit.NewClock(memT0)
	n := NewMemNetwork(MemConfig{Delay: 10 * time.Millisecond}, clk.Now)
	a, b, c := n.Join("a"), n.Join("b"), n.Join("c")
	buf := []byte("hello")
	if err := a.Send(buf); err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXX") // Send must not retain b

	if got := n.Deliver(memT0.Add(9 * time.Millisecond)); got != 0 {
		t.Fatalf("Deliver before due time delivered %d, want 0", got)
	}
	if got := n.Pending(); got != 2 {
		t.Fatalf("Pending = %d, want 2", got)
	}
	if got := n.Deliver(memT0.Add(10 * time.Millisecond)); got != 2 {
		t.Fatalf("Deliver at due time delivered %d, want 2", got)
	}
	if ps := drain(a); len(ps) != 0 {
		t.Errorf("sender received %v", payloads(ps))
	}
	for _, r := range []*MemTransport{b, c} {
		ps := drain(r)
		if len(ps) != 1 {
			t.Fatalf("%s received %d packets, want 1", r.Name(), len(ps))
		}
		p := ps[0]
		if string(p.Data) != "hello" || p.From != "a" || !p.At.Equal(memT0.Add(10*time.Millisecond)) {
			t.Errorf("%s received %q from %q at %v, want \"hello\" from \"a\" at t0+10ms", r.Name(), p.Data, p.From, p.At)
		}
	}
	// Each receiver owns its Data.
	n.Deliver(memT0) // nothing
	if err := b.Send([]byte("x")); err != nil {
		t.Fatal(err)
	}
	n.Deliver(memT0.Add(time.Second))
	pa, pc := drain(a), drain(c)
	if len(pa) != 1 || len(pc) != 1 {
		t.Fatalf("got %d and %d packets, want 1 each", len(pa), len(pc))
	}
	pa[0].Data[0] = 'y'
	if string(pc[0].Data) != "x" {
		t.Errorf("receivers share Data: c sees %q after a changed its copy", pc[0].Data)
	}
	want := MemStats{Sent: 2, Delivered: 4}
	if got := n.Stats(); got != want {
		t.Errorf("Stats = %+v, want %+v", got, want)
	}
}

func TestMemLoss(t *testing.T) {
	const sends, loss = 10000, 0.3
	n := NewMemNetwork(MemConfig{Loss: loss, Seed: 1}, testkit.NewClock(memT0).Now)
	a, b := n.Join("a"), n.Join("b")
	for i := range sends {
		if err := a.Send([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 999 { // stay well within the channel's buffer
			n.Deliver(memT0)
			drain(b)
		}
	}
	n.Deliver(memT0)
	drain(b)
	s := n.Stats()
	// Binomial: sd = sqrt(n p (1-p)) ~ 46; allow 5 sd.
	sd := math.Sqrt(sends * loss * (1 - loss))
	if d := math.Abs(float64(s.Dropped) - sends*loss); d > 5*sd {
		t.Errorf("dropped %d of %d, want about %.0f (±%.0f)", s.Dropped, sends, sends*loss, 5*sd)
	}
	if s.Sent != sends || s.Delivered+s.Dropped != sends {
		t.Errorf("Stats = %+v: want Sent %d = Delivered + Dropped", s, sends)
	}
}

func TestMemDuplicate(t *testing.T) {
	n := NewMemNetwork(MemConfig{Duplicate: 0.5, Seed: 2}, testkit.NewClock(memT0).Now)
	a, b := n.Join("a"), n.Join("b")
	const sends = 1000
	for i := range sends {
		if err := a.Send(fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	got := n.Deliver(memT0)
	s := n.Stats()
	if s.Duplicated < sends/3 || s.Duplicated > 2*sends/3 {
		t.Errorf("duplicated %d of %d, want about half", s.Duplicated, sends)
	}
	if got != sends+int(s.Duplicated) {
		t.Errorf("delivered %d, want %d sends + %d duplicates", got, sends, s.Duplicated)
	}
	counts := map[string]int{}
	for _, p := range drain(b) {
		counts[string(p.Data)]++
	}
	for i := range sends {
		if c := counts[fmt.Sprint(i)]; c != 1 && c != 2 {
			t.Fatalf("datagram %d arrived %d times, want 1 or 2", i, c)
		}
	}
}

func TestMemJitterReorders(t *testing.T) {
	clk := testkit.NewClock(memT0)
	n := NewMemNetwork(MemConfig{Delay: 5 * time.Millisecond, Jitter: 50 * time.Millisecond, Seed: 3}, clk.Now)
	a, b := n.Join("a"), n.Join("b")
	const sends = 200
	for i := range sends {
		clk.Set(memT0.Add(time.Duration(i) * time.Millisecond))
		if err := a.Send([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing is due before the base delay.
	if got := n.Deliver(memT0.Add(5*time.Millisecond - 1)); got != 0 {
		t.Fatalf("delivered %d before the base delay", got)
	}
	// Deliver in steps, as a node loop on a fake clock would.
	var ps []Packet
	for ms := 0; ms <= sends+60; ms++ {
		n.Deliver(memT0.Add(time.Duration(ms) * time.Millisecond))
		ps = append(ps, drain(b)...)
	}
	if len(ps) != sends {
		t.Fatalf("received %d, want all %d", len(ps), sends)
	}
	order := make([]int, len(ps))
	for i, p := range ps {
		order[i] = int(p.Data[0])
		if i > 0 && p.At.Before(ps[i-1].At) {
			t.Fatalf("packet %d due %v before the previous one's %v", i, p.At, ps[i-1].At)
		}
		sent := memT0.Add(time.Duration(order[i]) * time.Millisecond)
		if d := p.At.Sub(sent); d < 5*time.Millisecond || d >= 55*time.Millisecond {
			t.Fatalf("packet %d delayed %v, want in [5ms, 55ms)", order[i], d)
		}
	}
	if slices.IsSorted(order) {
		t.Error("jitter did not reorder anything")
	}
	slices.Sort(order)
	for i, v := range order {
		if v != i {
			t.Fatalf("packet %d missing or repeated", i)
		}
	}
}

func TestMemTiesInSendOrder(t *testing.T) {
	n := NewMemNetwork(MemConfig{Delay: time.Millisecond}, testkit.NewClock(memT0).Now)
	a, b := n.Join("a"), n.Join("b")
	for i := range 100 {
		a.Send([]byte{byte(i)})
	}
	n.Deliver(memT0.Add(time.Millisecond))
	for i, p := range drain(b) {
		if int(p.Data[0]) != i {
			t.Fatalf("packet %d arrived at position %d: ties must keep send order", p.Data[0], i)
		}
	}
}

func TestMemPartition(t *testing.T) {
	n := NewMemNetwork(MemConfig{}, testkit.NewClock(memT0).Now)
	nodes := map[string]*MemTransport{}
	for _, name := range []string{"a", "b", "c", "d"} {
		nodes[name] = n.Join(name)
	}
	// heard sends one datagram from each node and returns who heard whom.
	heard := func() map[string][]string {
		for _, name := range []string{"a", "b", "c", "d"} {
			nodes[name].Send([]byte(name))
		}
		n.Deliver(memT0)
		got := map[string][]string{}
		for name, tr := range nodes {
			got[name] = payloads(drain(tr))
			slices.Sort(got[name])
		}
		return got
	}
	check := func(step string, want map[string][]string) {
		t.Helper()
		got := heard()
		for name := range nodes {
			if !slices.Equal(got[name], want[name]) {
				t.Errorf("%s: %s heard %v, want %v", step, name, got[name], want[name])
			}
		}
	}
	n.Partition([]string{"a", "b"}, []string{"c"}) // d is in no group
	check("partitioned", map[string][]string{"a": {"b"}, "b": {"a"}})
	if s := n.Stats(); s.Partitioned != 10 {
		t.Errorf("Partitioned = %d, want 10", s.Partitioned)
	}
	n.Partition()
	check("healed", map[string][]string{
		"a": {"b", "c", "d"}, "b": {"a", "c", "d"}, "c": {"a", "b", "d"}, "d": {"a", "b", "c"},
	})
}

func TestMemOverflow(t *testing.T) {
	n := NewMemNetwork(MemConfig{}, testkit.NewClock(memT0).Now)
	a, _ := n.Join("a"), n.Join("b")
	for range memBuffer + 10 {
		a.Send(nil)
	}
	if got := n.Deliver(memT0); got != memBuffer {
		t.Errorf("delivered %d, want %d (the buffer)", got, memBuffer)
	}
	if s := n.Stats(); s.Overflow != 10 {
		t.Errorf("Overflow = %d, want 10", s.Overflow)
	}
}

func TestMemClose(t *testing.T) {
	n := NewMemNetwork(MemConfig{}, testkit.NewClock(memT0).Now)
	a, b := n.Join("a"), n.Join("b")
	a.Send([]byte("in flight"))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if got := n.Deliver(memT0); got != 0 {
		t.Errorf("delivered %d to a closed node", got)
	}
	if _, ok := <-b.Packets(); ok {
		t.Error("Packets not closed after Close")
	}
	if err := b.Send([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Send after Close = %v, want net.ErrClosed", err)
	}
	// The name is free again.
	b2 := n.Join("b")
	a.Send([]byte("again"))
	n.Deliver(memT0)
	if ps := drain(b2); len(ps) != 1 || string(ps[0].Data) != "again" {
		t.Errorf("rejoined node got %v, want [again]", payloads(ps))
	}
}

// TestMemDeterministic runs the same faulty scenario twice and expects the
// same packets at the same times; a different seed must differ.
func TestMemDeterministic(t *testing.T) {
	run := func(seed int64) []string {
		clk := testkit.NewClock(memT0)
		n := NewMemNetwork(MemConfig{Loss: 0.2, Duplicate: 0.1, Delay: 3 * time.Millisecond, Jitter: 20 * time.Millisecond, Seed: seed}, clk.Now)
		ts := []*MemTransport{n.Join("a"), n.Join("b"), n.Join("c")}
		var log []string
		for step := range 300 {
			clk.Set(memT0.Add(time.Duration(step) * time.Millisecond))
			ts[step%3].Send(fmt.Appendf(nil, "%d", step))
			if step == 150 {
				n.SetConfig(MemConfig{Loss: 0.5, Jitter: 5 * time.Millisecond})
			}
			n.Deliver(clk.Now())
			for _, tr := range ts {
				for _, p := range drain(tr) {
					log = append(log, fmt.Sprintf("%s<-%s %s @%v", tr.Name(), p.From, p.Data, p.At.Sub(memT0)))
				}
			}
		}
		return append(log, fmt.Sprintf("%+v", n.Stats()))
	}
	first, second := run(7), run(7)
	if !slices.Equal(first, second) {
		t.Fatalf("same seed, different runs:\n%v\n%v", first, second)
	}
	if slices.Equal(first, run(8)) {
		t.Error("different seeds gave identical runs")
	}
}

func TestMemJoinTwicePanics(t *testing.T) {
	n := NewMemNetwork(MemConfig{}, nil)
	n.Join("a")
	defer func() {
		if recover() == nil {
			t.Error("joining a name twice did not panic")
		}
	}()
	n.Join("a")
}

// TestMemConcurrent exercises the network from several goroutines under
// -race.
func TestMemConcurrent(t *testing.T) {
	n := NewMemNetwork(MemConfig{Loss: 0.1, Seed: 4}, nil)
	ts := []*MemTransport{n.Join("a"), n.Join("b"), n.Join("c")}
	done := make(chan struct{})
	for _, tr := range ts {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 200 {
				tr.Send([]byte("x"))
			}
		}()
	}
	for range 50 {
		n.Deliver(time.Now())
	}
	for range ts {
		<-done
	}
	n.Deliver(time.Now())
	s := n.Stats()
	if s.Sent != 600 || s.Delivered+s.Dropped != 1200 {
		t.Errorf("Stats = %+v, want Sent 600 and Delivered+Dropped 1200", s)
	}
	for _, tr := range ts {
		tr.Close()
	}
}
