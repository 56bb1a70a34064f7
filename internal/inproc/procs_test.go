package inproc

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The child processes of TestProcsExactThroughKills are this test binary
// run again with -test.run=^TestProcsChild$ and these variables set.
const (
	childModeEnv  = "DTHROTTLE_PROCS_MODE" // "worker" or "victim"
	childSockEnv  = "DTHROTTLE_PROCS_SOCK"
	childTagEnv   = "DTHROTTLE_PROCS_TAG"
	childStartEnv = "DTHROTTLE_PROCS_START" // Unix ns
	childStopEnv  = "DTHROTTLE_PROCS_STOP"  // Unix ns
)

const (
	procsRate    = 200 // tokens a second
	procsBurst   = 50
	procsWindow  = 2 * time.Second
	procsLead    = 2 * time.Second // for the children to start and attach, on a loaded machine too
	procsWorkers = 3               // Go processes deciding in process, 2 goroutines each
	victimTags   = 300             // the victim's tags, v:0 to v:299
	maxKills     = 100
	// maxGap is the longest a hammerer may go between two decisions:
	// far beyond the scheduling delays of a loaded 2-CPU machine, half
	// the window, so that a process stalled by a killed one (a lock it
	// held, a state it left half written) shows.
	maxGap = time.Second
	// refill is the time the bucket takes to fill from empty: a tag left
	// alone that long loses tokens, which makes the least served less
	// than burst + rate x the window.
	refill = time.Second * procsBurst / procsRate
)

// procsReport is what a hammerer of the counted tag tells: the queries
// it made and was served, and when, as the daemon's clock (the wall
// clock, CLOCK_REALTIME) reads. dt_hammer (libdthrottle) prints
// the same fields.
type procsReport struct {
	served, decisions, local, asked, failed int64
	// firstBegin, firstDone: when the first query began and returned;
	// lastBegin, lastEnd: the last one; maxGap: the longest time between
	// two queries returning. Unix ns, and ns.
	firstBegin, firstDone, lastBegin, lastEnd, maxGap int64
}

func (r procsReport) String() string {
	return fmt.Sprintf("served=%d decisions=%d local=%d asked=%d failed=%d first_begin=%d first_done=%d last_begin=%d last_end=%d max_gap=%d",
		r.served, r.decisions, r.local, r.asked, r.failed, r.firstBegin, r.firstDone, r.lastBegin, r.lastEnd, r.maxGap)
}

func parseProcsReport(line string) (procsReport, error) {
	var r procsReport
	fields := map[string]*int64{
		"served": &r.served, "decisions": &r.decisions, "local": &r.local, "asked": &r.asked, "failed": &r.failed,
		"first_begin": &r.firstBegin, "first_done": &r.firstDone, "last_begin": &r.lastBegin, "last_end": &r.lastEnd, "max_gap": &r.maxGap,
	}
	for _, kv := range strings.Fields(line) {
		k, v, _ := strings.Cut(kv, "=")
		p := fields[k]
		if p == nil {
			return r, fmt.Errorf("unknown field %q in %q", k, line)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return r, fmt.Errorf("%s in %q: %v", k, line, err)
		}
		*p = n
		delete(fields, k)
	}
	if len(fields) != 0 {
		return r, fmt.Errorf("fields missing in %q", line)
	}
	return r, nil
}

// merge adds o's counts to r and widens r's times to cover o's.
func (r *procsReport) merge(o procsReport) {
	if o.decisions == 0 {
		return
	}
	if r.decisions == 0 {
		r.firstBegin, r.firstDone = o.firstBegin, o.firstDone
	}
	r.served += o.served
	r.decisions += o.decisions
	r.local += o.local
	r.asked += o.asked
	r.failed += o.failed
	r.firstBegin = min(r.firstBegin, o.firstBegin)
	r.firstDone = min(r.firstDone, o.firstDone)
	r.lastBegin = max(r.lastBegin, o.lastBegin)
	r.lastEnd = max(r.lastEnd, o.lastEnd)
	r.maxGap = max(r.maxGap, o.maxGap)
}

// hammer waits until start, then calls decide until stop (Unix ns);
// decide answers whether the query was served and how.
func hammer(start, stop int64, decide func() (bool, Path)) procsReport {
	time.Sleep(time.Until(time.Unix(0, start)))
	var r procsReport
	prev := int64(-1)
	for now := time.Now().UnixNano(); now < stop; now = time.Now().UnixNano() {
		ok, path := decide()
		end := time.Now().UnixNano()
		r.decisions++
		if ok {
			r.served++
		}
		switch path {
		case Local:
			r.local++
		case Asked:
			r.asked++
		default:
			r.failed++
		}
		if prev < 0 {
			r.firstBegin, r.firstDone = now, end
		} else {
			r.maxGap = max(r.maxGap, end-prev)
		}
		r.lastBegin, r.lastEnd, prev = now, end, end
	}
	return r
}

// TestProcsChild is the child processes' side of
// TestProcsExactThroughKills; run on its own it does nothing.
func TestProcsChild(t *testing.T) {
	mode := os.Getenv(childModeEnv)
	if mode == "" {
		t.Skip("a child process of TestProcsExactThroughKills")
	}
	sock := os.Getenv(childSockEnv)
	start, _ := strconv.ParseInt(os.Getenv(childStartEnv), 10, 64)
	stop, _ := strconv.ParseInt(os.Getenv(childStopEnv), 10, 64)
	tb, err := Open(sock, false)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	switch mode {
	case "worker":
		// Two goroutines on one Table, deciding the counted tag.
		tag := []byte(os.Getenv(childTagEnv))
		var reports [2]procsReport
		var wg sync.WaitGroup
		for i := range reports {
			wg.Go(func() {
				reports[i] = hammer(start, stop, func() (bool, Path) {
					r := tb.Decide(tag)
					return r.OK, r.Path
				})
			})
		}
		wg.Wait()
		var all procsReport
		for _, r := range reports {
			all.merge(r)
		}
		fmt.Printf("REPORT %s\n", all)
	case "victim":
		// Other tags of the counted tag's shard until killed (or, should
		// nobody kill it, until a while after the window): some new to
		// the daemon (asked, inserted, the shard's index growing), most
		// decided in process, served and refused.
		rng := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(time.Now().UnixNano())))
		deadline := time.Unix(0, stop).Add(5 * time.Second)
		for i := 0; time.Now().Before(deadline); i++ {
			tb.Decide(fmt.Appendf(nil, "v:%d", rng.IntN(victimTags)))
			if i == 50 {
				fmt.Println("READY")
			}
		}
	default:
		t.Fatalf("unknown mode %q", mode)
	}
}

// TestProcsExactThroughKills hammers one tag at once from several
// processes deciding in process (Go, and C through libdthrottle when a C
// compiler is at hand), each with two threads, and from a connection
// asking over the socket, for two seconds, while another process deciding
// on other tags of the same shard is SIGKILLed and started again every few
// tens of milliseconds, anywhere in its work: in a compare-and-swap,
// between a hit spent and reported, in an ask, in the attach.
//
// The hammerers must keep deciding through the kills (no stall), and
// together be served exactly what the limit allows over the window as the
// daemon saw it: burst + rate x (from the first query to the last), within
// one. Each hammerer reports when its first and last queries began and
// returned, on the daemon's clock; the bounds take the widest window for
// the most that could be served and the narrowest for the least.
//
// Why the victim never decides on the counted tag: a process killed
// between the compare-and-swap that spent a token and the moment it tells
// the test (or even the unreported counter it adds next) was served a hit
// nobody can count, so counting it would make the total unknowable. It
// shares everything else with the hammerers: the shard, its index (which
// its new tags make grow and move), the record area, the dirty bitmap,
// the counters, the socket; and the daemon reaps its connections and
// half-reported hits. Its own tags' exactness is not checked: a hit spent
// by a process killed before it reports it is lost to the peers (the
// daemon reports what the state file holds), never served twice.
func TestProcsExactThroughKills(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes for a few seconds")
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "d.sock")
	// max_tags = 1000: one shard, shared by the counted tag and the victim's.
	run(t, sock, fmt.Sprintf("rate = %d\nburst = %d\nmax_tags = 1000", procsRate, procsBurst), true)
	hammerC := buildHammer(t, dir)

	const tag = "hot"
	start := time.Now().Add(procsLead).UnixNano()
	stop := start + procsWindow.Nanoseconds()
	env := append(os.Environ(),
		childSockEnv+"="+sock, childTagEnv+"="+tag,
		childStartEnv+"="+strconv.FormatInt(start, 10), childStopEnv+"="+strconv.FormatInt(stop, 10))
	child := func(mode string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestProcsChild$", "-test.count=1")
		cmd.Env = append(slices.Clip(env), childModeEnv+"="+mode)
		cmd.Stderr = os.Stderr
		return cmd
	}

	type result struct {
		name string
		out  []byte
		err  error
	}
	results := make(chan result, procsWorkers+1)
	var hammerers []string
	for i := range procsWorkers {
		name := fmt.Sprintf("go worker %d", i)
		cmd := child("worker")
		hammerers = append(hammerers, name)
		go func() {
			out, err := cmd.Output()
			results <- result{name, out, err}
		}()
	}
	if hammerC != "" {
		cmd := exec.Command(hammerC, sock, tag, strconv.FormatInt(start, 10), strconv.FormatInt(stop, 10), "2")
		cmd.Stderr = os.Stderr
		hammerers = append(hammerers, "C (libdthrottle)")
		go func() {
			out, err := cmd.Output()
			results <- result{"C (libdthrottle)", out, err}
		}()
	}

	// The connection asking over the socket.
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	socketDone := make(chan procsReport, 1)
	go func() {
		rd := bufio.NewReader(conn)
		socketDone <- hammer(start, stop, func() (bool, Path) {
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := conn.Write([]byte(tag + "\n")); err != nil {
				return false, Failed
			}
			line, err := rd.ReadString('\n')
			if err != nil {
				return false, Failed
			}
			return line == "OK\n", Asked
		})
	}()

	// The victim, killed and started again until the window ends: every
	// other time once it is deciding, and otherwise at a random instant
	// from its start (in the runtime's start, the attach, the first asks).
	killsDeciding, starts := 0, 0
	victimDone := make(chan struct{})
	go func() {
		defer close(victimDone)
		for i := 0; i < maxKills && time.Now().UnixNano() < stop; i++ {
			cmd := child("victim")
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Error(err)
				return
			}
			if err := cmd.Start(); err != nil {
				t.Error(err)
				return
			}
			starts++
			ready := make(chan bool, 1)
			go func() {
				line, _ := bufio.NewReader(out).ReadString('\n')
				ready <- line == "READY\n"
			}()
			if i%2 == 1 {
				time.Sleep(time.Duration(5+rand.IntN(45)) * time.Millisecond)
			} else {
				select {
				case ok := <-ready:
					if ok {
						time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
						killsDeciding++
					}
				case <-time.After(5 * time.Second):
					t.Error("victim not deciding within 5s")
				}
			}
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()

	var total procsReport
	var reports []procsReport
	fail := false
	for range hammerers {
		r := <-results
		if r.err != nil {
			t.Errorf("%s: %v", r.name, r.err)
			fail = true
			continue
		}
		var rep procsReport
		found := false
		for _, line := range strings.Split(string(r.out), "\n") {
			if s, ok := strings.CutPrefix(line, "REPORT "); ok {
				rep, err = parseProcsReport(s)
				found = true
			} else if r.name == "C (libdthrottle)" && strings.HasPrefix(line, "served=") {
				rep, err = parseProcsReport(line)
				found = true
			}
		}
		if !found || err != nil {
			t.Errorf("%s: no report (%v) in:\n%s", r.name, err, r.out)
			fail = true
			continue
		}
		checkProgress(t, r.name, rep, start, stop)
		if rep.local == 0 {
			t.Errorf("%s decided nothing in process: %s", r.name, rep)
		}
		total.merge(rep)
		reports = append(reports, rep)
	}
	sockRep := <-socketDone
	checkProgress(t, "socket", sockRep, start, stop)
	total.merge(sockRep)
	reports = append(reports, sockRep)
	<-victimDone
	t.Logf("victim started and killed %d times, %d of them while deciding", starts, killsDeciding)
	// Every other start waits for its victim to decide before the kill, so
	// all of those must have; five of them, unless the machine was too
	// loaded to start that many victims in the window.
	if want := (starts + 1) / 2; killsDeciding < want || killsDeciding == 0 {
		t.Errorf("victim killed deciding %d times of %d starts, want %d", killsDeciding, starts, max(want, 1))
	} else if killsDeciding < 5 {
		t.Logf("victim killed deciding only %d times: machine too loaded to start more", killsDeciding)
	}
	if fail {
		t.FailNow()
	}

	// At most: burst + rate x the widest window any query spans, plus one
	// for the token being earned. The first query, which made the bucket
	// (full), began after total.firstBegin; the last ended before
	// total.lastEnd.
	widest := float64(total.lastEnd-total.firstBegin) / 1e9
	hi := procsBurst + procsRate*widest + 1
	// At least: from the first query (before total.firstDone) to the last
	// (after total.lastBegin) the bucket was kept empty, if the queries
	// never paused for as long as it takes to refill: each query refused
	// then means every token earned so far was spent, so all but the one
	// being earned were. That holds when some hammerer queried from the
	// start to the end of the window never pausing that long; on a
	// machine too loaded for any to, only the most is checked.
	narrowest := float64(total.lastBegin-total.firstDone) / 1e9
	lo := procsBurst + procsRate*narrowest - 1
	pressed := false
	for _, r := range reports {
		edge := refill.Nanoseconds() / 2
		if r.maxGap < edge && r.firstBegin-total.firstBegin < edge && total.lastBegin-r.lastBegin < edge {
			pressed = true
		}
	}
	t.Logf("served %d of %d queries (%d in process, %d asked, %d failed); window %.4fs to %.4fs: want %.1f to %.1f",
		total.served, total.decisions, total.local, total.asked, total.failed, narrowest, widest, lo, hi)
	if n := float64(total.served); n > hi {
		t.Fatalf("served %d, more than %.1f", total.served, hi)
	}
	if n := float64(total.served); n < lo {
		if pressed {
			t.Fatalf("served %d, fewer than %.1f", total.served, lo)
		}
		t.Logf("served %d, fewer than %.1f, but no hammerer kept the bucket empty all through: machine too loaded", total.served, lo)
	}
}

// checkProgress checks that a hammerer decided all through the window:
// from its start to its end, never stalled longer than maxGap.
func checkProgress(t *testing.T, name string, r procsReport, start, stop int64) {
	t.Helper()
	t.Logf("%s: %s", name, r)
	switch {
	case r.decisions == 0:
		t.Errorf("%s made no decision", name)
	case r.maxGap > maxGap.Nanoseconds():
		t.Errorf("%s stalled for %v", name, time.Duration(r.maxGap))
	case r.firstBegin > start+maxGap.Nanoseconds() || r.lastBegin < stop-maxGap.Nanoseconds():
		t.Errorf("%s decided from %+v to %+v of the window only", name,
			time.Duration(r.firstBegin-start), time.Duration(r.lastBegin-start))
	}
}

// buildHammer compiles libdthrottle's dt_hammer with the library
// into dir, or returns "" when no C compiler is installed (a failure under
// CI=true).
func buildHammer(t *testing.T, dir string) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cc is required under CI=true: %v", err)
		}
		t.Logf("cc not installed, no C process: %v", err)
		return ""
	}
	src := filepath.Join("..", "..", "libdthrottle")
	bin := filepath.Join(dir, "dt_hammer")
	args := []string{"-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-o", bin, "dt_hammer.c",
		"libdthrottle.c", "-lpthread"}
	cmd := exec.Command(cc, args...)
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building dt_hammer: %v\n%s", err, out)
	}
	return bin
}
