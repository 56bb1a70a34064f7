package hostile

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/tests/harness"
)

// stateWriterConfig is a daemon sharing its table, at stateWriterTags
// tags, under a limit that both serves and refuses the clients' known
// tags.
const stateWriterConfig = `[listen]
unix = "%%SOCK%%"
unix_mode = "0600"
[limit]
rate = 50
burst = 20
max_tags = %d
[admin]
http = "127.0.0.1:0"
`

// stateWriterTags is the test's max_tags.
const stateWriterTags = 100000

// memBoundKiB is what the daemon's private memory may grow by beside the
// writer: what it needs for its own worst case, every tag of max_tags hit
// within one interval, for which a drain holds 32 bytes and the key (the
// test's are at most 20 bytes) per tag, twice over for the garbage
// collector's headroom, beside 16 MiB for the fixed sketches of "who is
// throttled", the admin pages and the connections; and under 100 MiB.
const memBoundKiB = min(100<<10, 16<<10+2*(32+20)*stateWriterTags>>10)

// The writer writes in spells, spells of them in all, each after
// quietSpell without it; a last quietSpell follows. So the seconds
// without the writer and beside it alternate, and whatever else the
// machine runs meanwhile falls on both alike.
const (
	spells      = 5
	quietSpell  = 2 * time.Second
	writerSpell = 3 * time.Second
)

// TestStateWriterBounded: a client maps the state file writable, as any
// process that may connect to the socket may, and writes garbage over all
// of it, 15 s in all (random words anywhere, every record's counts at
// their maximum with every dirty bit set, huge key lengths, tat at
// INT64_MIN, zeroed stretches, the counters at their maximum), while
// other clients ask known and new tags over the socket and read
// /v1/stats, /v1/top, /metrics and /. Every answer is OK or NO and every
// page 200; the daemon's private memory (RssAnon) grows by less than its
// own worst case at max_tags needs (memBoundKiB), and less than 100 MiB;
// and the queries answered in a second beside the writer are, at the
// median, at least half those answered in a second without it.
func TestStateWriterBounded(t *testing.T) {
	harness.Alone(t) // a ratio of throughputs, measured on two cores
	d := harness.StartDaemon(t, fmt.Sprintf(stateWriterConfig, stateWriterTags))
	admin, pid := d.AdminAddr(t), d.Cmd.Process.Pid
	a := attachState(t, d.Sock)
	// The table filled to max_tags first, so that every second runs at
	// the cap, each new tag evicting one.
	fill := dialE(t, queryAddr{"unix", d.Sock})
	if err := floodTags(fill, 0, 2*stateWriterTags); err != nil {
		t.Fatal(err)
	}
	fill.Close()

	var (
		answered atomic.Int64          // queries answered so far
		bad      atomic.Pointer[error] // the first wrong answer or failed page
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	fail := func(err error) { bad.CompareAndSwap(nil, &err) }
	// Clients: pipelined batches of known tags (1,000 each, served and
	// refused) with a new tag every eighth query.
	const conns, batch = 4, 64
	for k := range conns {
		c := dialE(t, queryAddr{"unix", d.Sock})
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := askUntil(c, k, batch, stop, &answered); err != nil {
				fail(err)
			}
		}()
	}
	// A reader of the admin pages.
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := readPagesUntil(admin, stop); err != nil {
			fail(err)
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
	}()

	// The writer, in spells; the one running is stopped before the
	// mappings go.
	w := &garbageWriter{a: a, rng: rand.New(rand.NewPCG(1, 2))}
	var stopSpell func()
	t.Cleanup(func() {
		if stopSpell != nil {
			stopSpell()
		}
	})
	startSpell := func() {
		halt, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			w.spell(halt)
		}()
		stopSpell = sync.OnceFunc(func() { close(halt); <-done })
	}

	// Once a second: the queries answered, RssAnon and the daemon's CPU,
	// each second counted without the writer or beside it.
	type tally struct {
		rates     []float64 // queries answered in each second
		queries   int64
		cpu       int64 // the daemon's, in clock ticks
		peakKiB   int64
		firstPeak int64 // before the writer's first spell
	}
	var quiet, beside tally
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	rss0, err := rssAnonKiB(pid)
	if err != nil {
		t.Fatal(err)
	}
	<-tick.C // the first second: the clients connect
	lastN, lastCPU := answered.Load(), cpuTicks(t, pid)
	// report logs the figures so far, and returns the medians and the
	// growth of RssAnon.
	report := func() (mQuiet, mBeside float64, grow int64) {
		mQuiet, mBeside = median(quiet.rates), median(beside.rates)
		grow = max(quiet.peakKiB, beside.peakKiB) - rss0
		perQuery := func(k tally) float64 { return float64(k.cpu) * 1e4 / float64(max(k.queries, 1)) } // µs, at 100 ticks a second
		t.Logf("queries a second, median: %.0f without the writer %v, %.0f beside it %v (%.2fx)",
			mQuiet, quiet.rates, mBeside, beside.rates, mBeside/mQuiet)
		t.Logf("the daemon's CPU a query: %.2f µs without the writer, %.2f µs beside it", perQuery(quiet), perQuery(beside))
		t.Logf("RssAnon: %d KiB at the start, %d KiB at most before the writer, %d KiB at most in all (+%d KiB; bound %d KiB)",
			rss0, quiet.firstPeak, max(quiet.peakKiB, beside.peakKiB), grow, memBoundKiB)
		t.Logf("the writer: %d passes, %d MiB written, busy %.0f%% of its %v",
			w.passes, w.wrote>>20, 100*w.busy.Seconds()/(spells*writerSpell).Seconds(), spells*writerSpell)
		return mQuiet, mBeside, grow
	}
	take := func(span time.Duration, into *tally) {
		for range int(span / time.Second) {
			<-tick.C
			n, cpu := answered.Load(), cpuTicks(t, pid)
			rss, err := rssAnonKiB(pid)
			if err != nil {
				t.Fatalf("the daemon: %v\n%s", err, d.Stderr)
			}
			into.rates = append(into.rates, float64(n-lastN))
			into.queries += n - lastN
			into.cpu += cpu - lastCPU
			into.peakKiB = max(into.peakKiB, rss)
			lastN, lastCPU = n, cpu
			if e := bad.Load(); e != nil {
				report()
				t.Fatal(*e)
			}
		}
	}
	for i := range spells {
		take(quietSpell, &quiet)
		if i == 0 {
			quiet.firstPeak = quiet.peakKiB
		}
		startSpell()
		take(writerSpell, &beside)
		stopSpell()
	}
	take(quietSpell, &quiet)

	mQuiet, mBeside, grow := report()
	if mBeside < mQuiet/2 {
		t.Errorf("beside the writer, %.0f queries a second at the median, under half the %.0f without it", mBeside, mQuiet)
	}
	if grow >= memBoundKiB {
		t.Errorf("RssAnon grew %d KiB beside the writer, over the bound of %d KiB", grow, memBoundKiB)
	}
	if w.passes < 6 {
		t.Errorf("the writer made %d passes, not one of each kind", w.passes)
	}
}

// readPagesUntil reads /v1/stats, /v1/top, /metrics and / from the
// admin endpoint at admin, in turn, until stop is closed; each must
// answer 200.
func readPagesUntil(admin string, stop <-chan struct{}) error {
	hc := &http.Client{Timeout: 10 * time.Second}
	for {
		for _, p := range []string{"/v1/stats", "/v1/top", "/metrics", "/"} {
			select {
			case <-stop:
				return nil
			default:
			}
			res, err := hc.Get("http://" + admin + p)
			if err != nil {
				return fmt.Errorf("GET %s: %v", p, err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				return fmt.Errorf("GET %s: %d", p, res.StatusCode)
			}
		}
	}
}

// askUntil sends batches of batch queries on c until stop is closed,
// reads each batch's replies before sending the next, and adds the
// queries answered to n. Client k asks known tags k-0 to k-999, in turn,
// and a new tag every eighth query. Every reply must be OK or NO.
func askUntil(c net.Conn, k, batch int, stop <-chan struct{}, n *atomic.Int64) error {
	var b []byte
	reply := make([]byte, 3*batch)
	known, fresh := 0, 0
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		b = b[:0]
		for q := range batch {
			if q%8 == 7 {
				b = fmt.Appendf(b, "new-%d-%d\n", k, fresh)
				fresh++
			} else {
				b = fmt.Appendf(b, "known-%d-%d\n", k, known)
				known = (known + 1) % 1000
			}
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(b); err != nil {
			return fmt.Errorf("client %d: %v", k, err)
		}
		if _, err := io.ReadFull(c, reply); err != nil {
			return fmt.Errorf("client %d: %v", k, err)
		}
		for j := 0; j < len(reply); j += 3 {
			if r := reply[j : j+3]; !bytes.Equal(r, []byte("OK\n")) && !bytes.Equal(r, []byte("NO\n")) {
				return fmt.Errorf("client %d: reply %q", k, r)
			}
		}
		n.Add(int64(batch))
	}
}

// median returns the median of xs (nonempty).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
