package inproc

import (
	"bufio"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/daemontest"
)

// run starts a daemon on the Unix socket sock with the given [limit] and
// returns a function that stops it.
func run(t testing.TB, sock, limit string, share bool) func() {
	t.Helper()
	text := "[listen]\nunix = \"" + sock + "\"\n"
	if !share {
		text += "share_table = false\n"
	}
	return daemontest.Run(t, sock, text+"[limit]\n"+limit+"\n")
}

// askSocket asks tags over a connection of its own.
func askSocket(t *testing.T, sock string, tags ...string) string {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte(strings.Join(tags, "\n") + "\n"))
	rd := bufio.NewReader(c)
	var out []string
	for range tags {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, strings.TrimSpace(line))
	}
	return strings.Join(out, " ")
}

func decide(tb *Table, tag string) string {
	r := tb.Decide([]byte(tag))
	a := "NO"
	if r.OK {
		a = "OK"
	}
	return a + "/" + [...]string{"local", "asked", "failed"}[r.Path]
}

// TestDecidesInProcess: a new tag is asked, then decided in process on
// the state the socket decides on.
func TestDecidesInProcess(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	run(t, sock, "rate = 0.001\nburst = 3", true)
	tb, err := Open(sock, true)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if !tb.Shared() {
		t.Fatal("not shared")
	}
	var got []string
	for range 4 {
		got = append(got, decide(tb, "a"))
	}
	if want := "OK/asked OK/local OK/local NO/local"; strings.Join(got, " ") != want {
		t.Fatalf("got %v, want %s", got, want)
	}
	if got := askSocket(t, sock, "a", "b"); got != "NO OK" {
		t.Fatalf("socket after: %s, want NO OK", got)
	}
	if got := decide(tb, "b"); got != "OK/local" {
		t.Fatalf("b after the socket inserted it: %s", got)
	}
	if st := tb.Stats(); st.Local != 4 || st.Asked != 1 || st.Attaches != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestSharingOff: with share_table = false every query is asked.
func TestSharingOff(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	run(t, sock, "rate = 0.001\nburst = 2", false)
	tb, err := Open(sock, true)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if tb.Shared() {
		t.Fatal("shared with share_table = false")
	}
	got := []string{decide(tb, "a"), decide(tb, "a"), decide(tb, "a")}
	if strings.Join(got, " ") != "OK/asked OK/asked NO/asked" {
		t.Fatalf("got %v", got)
	}
}

// TestDaemonRestart: while the daemon is gone the fail mode answers;
// once it is back the caller attaches again and decides in process,
// without being restarted.
func TestDaemonRestart(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	stop := run(t, sock, "rate = 0.001\nburst = 3", true)
	tb, err := Open(sock, false)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	decide(tb, "a")
	stop()
	if got := decide(tb, "a"); got != "NO/failed" {
		t.Fatalf("daemon stopped, fail closed: %s", got)
	}
	run(t, sock, "rate = 0.001\nburst = 3", true)
	deadline := time.Now().Add(5 * time.Second)
	for {
		time.Sleep(RetryEvery)
		if got := decide(tb, "a"); got == "OK/asked" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("not attached again: %s", got)
		}
	}
	if got := decide(tb, "a"); got != "OK/local" {
		t.Fatalf("after attaching again: %s", got)
	}
}

// TestExactAcrossPaths hammers one tag from goroutines deciding in
// process and a connection asking over the socket, for about a second:
// exactly burst + rate x elapsed are served, within one.
func TestExactAcrossPaths(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	run(t, sock, "rate = 200\nburst = 20", true)
	tb, err := Open(sock, true)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	start := time.Now()
	// served counts the OKs; gap is the longest time without a decision
	// on any path, since the one before (last, in Unix nanoseconds).
	var served, last, gap atomic.Int64
	last.Store(start.UnixNano())
	decided := func(ok bool) {
		if ok {
			served.Add(1)
		}
		now := time.Now().UnixNano()
		d := now - last.Swap(now)
		for g := gap.Load(); d > g && !gap.CompareAndSwap(g, d); g = gap.Load() {
		}
	}
	decided(tb.Decide([]byte("hot")).OK)
	stopAt := start.Add(time.Second)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stopAt) {
				decided(tb.Decide([]byte("hot")).OK)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		rd := bufio.NewReader(c)
		for time.Now().Before(stopAt) {
			c.Write([]byte("hot\n"))
			line, _ := rd.ReadString('\n')
			decided(line == "OK\n")
		}
	}()
	wg.Wait()
	// At most: no token after the last answer. Waiting for a goroutine
	// stalled past stopAt (a loaded machine) lengthens elapsed, not the
	// time the tag was hammered.
	elapsed := time.Since(start).Seconds()
	if n, hi := float64(served.Load()), 20+200*elapsed+1; n > hi {
		t.Fatalf("served %v in %.3fs, want at most %.0f", n, elapsed, hi)
	}
	// At least: every token earned until stopAt was there to take (less
	// 50 ms for the last queries' latency), if no pause on every path at
	// once let the bucket fill (20 tokens: 100 ms) and refill past it.
	lo := 20 + 200*(stopAt.Sub(start).Seconds()-0.05) - 1
	if n, g := float64(served.Load()), time.Duration(gap.Load()); n < lo {
		if g < 50*time.Millisecond {
			t.Fatalf("served %v in %.3fs, want at least %.0f (no path paused longer than %v)", n, elapsed, lo, g)
		}
		t.Logf("served %v, fewer than %.0f, but every path paused for %v at once: machine too loaded", n, lo, g)
	}
	if st := tb.Stats(); st.Local == 0 {
		t.Fatalf("nothing decided in process: %+v", st)
	}
}
