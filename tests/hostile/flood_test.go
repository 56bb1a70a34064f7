package hostile

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/procstat"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// fullFlood is set (DTHROTTLE_FLOOD=full, as scripts/reliability.sh does)
// to run the floods at full size.
var fullFlood = os.Getenv("DTHROTTLE_FLOOD") == "full"

// TestFloodIdleConns holds 10,000 idle connections open on a daemon with
// max_conns = 10000: all are taken into service, one more is refused, and
// each still answers afterwards; then the daemon stops cleanly with them
// all open. It reports the daemon's memory per connection, idle and once
// used.
func TestFloodIdleConns(t *testing.T) {
	harness.Alone(t)
	n := connsAllowed(t, 10000)
	d, admin, eps := startBadInput(t, n)
	pid := d.Cmd.Process.Pid
	awaitMetric(t, admin, "dthrottle_connections", 0)
	rss0 := rssKiB(t, pid)
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < n; i++ {
		conns = append(conns, dialE(t, eps[0]))
	}
	awaitMetric(t, admin, "dthrottle_connections", float64(n))
	rssIdle := rssKiB(t, pid)

	over := dialE(t, eps[1])
	over.SetReadDeadline(time.Now().Add(5 * time.Second))
	if k, err := over.Read(make([]byte, 8)); k != 0 || err != io.EOF {
		t.Fatalf("connection %d: read %d bytes, %v; want end of file at once", n+1, k, err)
	}
	over.Close()

	// Every one of them is live: a request on each, then every reply.
	for i, c := range conns {
		c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := fmt.Fprintf(c, "idle-%d\n", i); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	for i, c := range conns {
		b := make([]byte, 3)
		if _, err := io.ReadFull(c, b); err != nil || string(b) != "OK\n" {
			t.Fatalf("connection %d: %q, %v", i, b, err)
		}
	}
	rssUsed := rssKiB(t, pid)
	perIdle, perUsed := (rssIdle-rss0)*1024/int64(n), (rssUsed-rss0)*1024/int64(n)
	t.Logf("daemon RSS %d KiB, %d KiB with %d idle connections (%d B each), %d KiB once each answered once (%d B each)",
		rss0, rssIdle, n, perIdle, rssUsed, perUsed)
	if perUsed > 64<<10 {
		t.Fatalf("%d bytes of RSS per connection, over 64 KiB", perUsed)
	}
	// Two slots for the probes: one's slot is freed after its client closes.
	conns[0].Close()
	conns[1].Close()
	awaitMetric(t, admin, "dthrottle_connections", float64(n-2))
	probeFresh(t, eps)

	// Stopping with them all open: each is closed, the daemon exits cleanly.
	start := time.Now()
	d.Stop(t)
	for i, c := range conns[2:] {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if k, err := c.Read(make([]byte, 8)); k != 0 || err != io.EOF {
			t.Fatalf("connection %d after the stop: read %d bytes, %v; want end of file", i+2, k, err)
		}
	}
	t.Logf("stopped with %d connections open in %v", n-2, time.Since(start).Round(time.Millisecond))
}

// TestFloodOutOfFiles runs the daemon with 64 file descriptors and opens
// more connections than it can accept: the accept loop backs off to one
// try a second instead of spinning, those served are still answered, and
// once connections close the waiting ones are accepted and served.
func TestFloodOutOfFiles(t *testing.T) {
	harness.Alone(t)
	prlimit := harness.RequireTool(t, "prlimit")
	const limit = 64
	dir := t.TempDir()
	sock, path := filepath.Join(dir, "d.sock"), filepath.Join(dir, "dthrottle.toml")
	config := fmt.Sprintf("[listen]\nunix = %q\n[limit]\nrate = 0.001\nburst = 3\n", sock)
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	d := harness.RunDaemonCmd(t, sock, exec.Command(prlimit, fmt.Sprintf("--nofile=%d:%d", limit, limit), harness.Binary, "-config", path))
	pid := d.Cmd.Process.Pid
	limits, _ := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if !regexp.MustCompile(`Max open files\s+64\s+64\s`).Match(limits) {
		t.Fatalf("the daemon's file limit is not 64:\n%s", limits)
	}
	e := queryAddr{"unix", sock}
	conns := make([]net.Conn, limit+16)
	for i := range conns {
		conns[i] = dialE(t, e) // the backlog takes those not accepted
		defer conns[i].Close()
	}
	d.AwaitLog(t, "accept failed, retrying")
	// Every descriptor number the limit allows is taken. One may be
	// free for a moment (the harness's readiness probe, closed by the
	// daemon once it reads its end); the next try of accept, at most a
	// second away, takes it for a waiting connection.
	free := func() int {
		for fd := range limit {
			if _, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd)); err != nil {
				return fd
			}
		}
		return -1
	}
	for deadline := time.Now().Add(5 * time.Second); free() >= 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if fd := free(); fd >= 0 {
		t.Fatalf("daemon's fd %d is still free 5 s after accept failed", fd)
	}
	// The first connections were accepted (in order) and are served.
	if got := askOn(t, conns[0], "first"); got != "OK\n" {
		t.Fatalf("served connection: %q", got)
	}

	// Once the pause has reached its 1s cap, a 2s window holds about
	// two tries, and the daemon is idle meanwhile.
	d.AwaitLog(t, "delay=1s")
	warn0, cpu0, t0 := strings.Count(d.Stderr.String(), "accept failed"), cpuTicks(t, pid), time.Now()
	<-time.After(2 * time.Second) // a measuring window, not a wait for an event
	warns, cpu, window := strings.Count(d.Stderr.String(), "accept failed")-warn0, cpuTicks(t, pid)-cpu0, time.Since(t0)
	t.Logf("out of files: %d accept warnings and %d CPU ticks (1/100 s) in %v", warns, cpu, window.Round(time.Millisecond))
	if warns > 4 {
		t.Errorf("%d accept warnings in %v: not backing off", warns, window)
	}
	if cpu > 20 {
		t.Errorf("%d ticks of CPU in %v while out of files: spinning", cpu, window)
	}

	// Closing connections frees files: the waiting ones are accepted.
	for _, c := range conns[:limit/2] {
		c.Close()
	}
	for i, c := range conns[limit/2:] {
		if got := askOn(t, c, fmt.Sprintf("late-%d", i)); got != "OK\n" {
			t.Fatalf("waiting connection %d: %q", i, got)
		}
	}
	probeFresh(t, []queryAddr{e})
}

// floodConfig has room for every flood connection and a burst of 50.
const floodConfig = `
[listen]
unix = "%%SOCK%%"
max_conns = %d
[limit]
rate = 0.001
burst = 50
max_tags = %d
[admin]
http = "127.0.0.1:0"
`

// TestFloodConns opens 10,000 connections, all held at once, then has
// each pipeline 100 requests for its own tag at once: 1,000,000 in all,
// each reply checked (burst 50: 50 OK then 50 NO per connection).
func TestFloodConns(t *testing.T) {
	harness.Alone(t)
	const perConn = 100
	conns := connsAllowed(t, 10000)
	d := harness.StartDaemon(t, fmt.Sprintf(floodConfig, conns, 1000000))
	admin := d.AdminAddr(t)
	awaitMetric(t, admin, "dthrottle_connections", 0)
	cs := make([]net.Conn, conns)
	defer func() {
		for _, c := range cs {
			if c != nil {
				c.Close()
			}
		}
	}()
	start := time.Now()
	for i := range cs {
		cs[i] = dialE(t, queryAddr{"unix", d.Sock})
	}
	awaitMetric(t, admin, "dthrottle_connections", float64(conns))
	dialed := time.Since(start)

	want := strings.Repeat("OK\n", perConn/2) + strings.Repeat("NO\n", perConn-perConn/2)
	errs := make(chan error, conns)
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetDeadline(time.Now().Add(2 * time.Minute))
			in := bytes.Repeat([]byte(fmt.Sprintf("flood-%d\n", i)), perConn)
			if _, err := c.Write(in); err != nil {
				errs <- fmt.Errorf("connection %d: %w", i, err)
				return
			}
			c.(*net.UnixConn).CloseWrite()
			got, err := io.ReadAll(c)
			if diff := stepDiff(string(got), want); diff != "" || err != nil {
				errs <- fmt.Errorf("connection %d: %s (err %v)", i, diff, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	elapsed := time.Since(start) - dialed
	n := 0
	for err := range errs {
		if n++; n <= 5 {
			t.Error(err)
		}
	}
	if n > 0 {
		t.Fatalf("%d of %d connections failed", n, conns)
	}
	fams := harness.Scrape(t, admin)
	if got := harness.Metric(t, fams, "dthrottle_requests_total"); got != float64(conns*perConn) {
		t.Fatalf("requests_total = %v, want %d", got, conns*perConn)
	}
	if got := harness.Metric(t, fams, "dthrottle_connections_rejected_total"); got != 0 {
		t.Fatalf("connections_rejected_total = %v, want 0", got)
	}
	t.Logf("%d connections opened in %v, then %d pipelined requests answered in %v (%.0f/s)",
		conns, dialed.Round(time.Millisecond), conns*perConn, elapsed.Round(time.Millisecond),
		float64(conns*perConn)/elapsed.Seconds())
}

// floodTag appends the i-th random tag and its newline to b: splitmix64
// is a bijection, so no two tags are the same.
func floodTag(b []byte, i uint64) []byte {
	z := i + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	b = append(b, 'r')
	b = strconv.AppendUint(b, z, 16)
	return append(b, '\n')
}

// floodTags sends the tags from..to-1 on c, pipelined in batches while a
// reader takes the replies, and checks that every one is OK.
func floodTags(c net.Conn, from, to uint64) error {
	c.SetDeadline(time.Now().Add(10 * time.Minute))
	wrote := make(chan error, 1)
	go func() {
		var b []byte
		for i := from; i < to; {
			b = b[:0]
			for end := min(i+1000, to); i < end; i++ {
				b = floodTag(b, i)
			}
			if _, err := c.Write(b); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	buf := make([]byte, 3*1000)
	ok := bytes.Repeat([]byte("OK\n"), 1000)
	for left := 3 * (to - from); left > 0; {
		n, err := io.ReadFull(c, buf[:min(left, uint64(len(buf)))])
		if err != nil {
			return fmt.Errorf("reading replies: %w", err)
		}
		if !bytes.Equal(buf[:n], ok[:n]) {
			return fmt.Errorf("a fresh tag refused: %q", buf[:n])
		}
		left -= uint64(n)
	}
	return <-wrote
}

// TestFloodTags sends random tags, each once, through four pipelining
// connections against a max_tags cap: the table stays at the cap, every
// tag past it evicts one, and resident memory stays flat once the cap is
// reached. Reduced: 300,000 tags against 50,000. Full (DTHROTTLE_FLOOD=full):
// 10,000,000 against 1,000,000.
func TestFloodTags(t *testing.T) {
	harness.Alone(t)
	total, maxTags, step := uint64(300000), uint64(50000), uint64(25000)
	if fullFlood {
		total, maxTags, step = 10000000, 1000000, 500000
	}
	const nconns = 4
	d := harness.StartDaemon(t, fmt.Sprintf(floodConfig, 100, maxTags))
	admin, pid := d.AdminAddr(t), d.Cmd.Process.Pid
	conns := make([]net.Conn, nconns)
	for i := range conns {
		conns[i] = dialE(t, queryAddr{"unix", d.Sock})
		defer conns[i].Close()
	}

	// Resident memory, sampled every second throughout.
	stop, sampled := make(chan struct{}), make(chan int64)
	go func() {
		var peak int64
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				if rss, err := readRSS(pid); err == nil {
					peak = max(peak, rss)
				}
			case <-stop:
				sampled <- peak
				return
			}
		}
	}()

	rss0, start := rssKiB(t, pid), time.Now()
	t.Logf("%10s %10s %10s %10s %8s", "tags sent", "tracked", "evicted", "RSS KiB", "seconds")
	t.Logf("%10d %10d %10d %10d %8.1f", 0, 0, 0, rss0, 0.0)
	var rssAtCap, rssEnd, maxPastCap int64
	for sent := uint64(0); sent < total; sent += step {
		errs := make(chan error, nconns)
		for k, c := range conns {
			from := sent + uint64(k)*step/nconns
			go func() { errs <- floodTags(c, from, sent+uint64(k+1)*step/nconns) }()
		}
		for range conns {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		fams, rss := harness.Scrape(t, admin), rssKiB(t, pid)
		tags, evicted := harness.Metric(t, fams, "dthrottle_tags"), harness.Metric(t, fams, "dthrottle_evictions_total")
		t.Logf("%10d %10.0f %10.0f %10d %8.1f", sent+step, tags, evicted, rss, time.Since(start).Seconds())
		if tags > float64(maxTags) {
			t.Fatalf("%v tags tracked, over max_tags %d", tags, maxTags)
		}
		// Nothing refills at this rate, so nothing is forgotten: every
		// tag is still tracked or was evicted.
		if tags+evicted != float64(sent+step) {
			t.Fatalf("%v tracked + %v evicted != %d sent", tags, evicted, sent+step)
		}
		if sent+step == 2*maxTags {
			rssAtCap = rss
		}
		if sent+step >= 2*maxTags {
			maxPastCap = max(maxPastCap, rss)
		}
		rssEnd = rss
	}
	close(stop)
	peak := max(<-sampled, maxPastCap)
	t.Logf("%d tags against max_tags %d in %v: RSS %d KiB at the start, %d KiB at %d tags, %d KiB at the end, %d KiB at most",
		total, maxTags, time.Since(start).Round(time.Millisecond), rss0, rssAtCap, 2*maxTags, rssEnd, peak)
	// Flat: from twice the cap on, within 10% (and 16 MiB of slack for
	// the garbage collector's pacing).
	if limit := rssAtCap + rssAtCap/10 + 16<<10; maxPastCap > limit {
		t.Fatalf("RSS grew past the cap: %d KiB at %d tags, up to %d KiB later", rssAtCap, 2*maxTags, maxPastCap)
	}
}

// awaitMetric polls /metrics until name equals want.
func awaitMetric(t *testing.T, admin, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := harness.Metric(t, harness.Scrape(t, admin), name)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v after 15s, want %v", name, got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// rssKiB returns the resident memory of process pid (VmRSS), in KiB.
func rssKiB(t testing.TB, pid int) int64 {
	t.Helper()
	n, err := readRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// readRSS returns the resident memory of process pid (VmRSS), in KiB.
func readRSS(pid int) (int64, error) { return readStatusKiB(pid, "VmRSS") }

// readStatusKiB returns the field of /proc/pid/status counted in kB, such
// as VmRSS or VmHWM (the most resident memory the process has had).
func readStatusKiB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(`(?m)^` + field + `:\s+(\d+) kB$`).FindSubmatch(b)
	if m == nil {
		return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
	}
	return strconv.ParseInt(string(m[1]), 10, 64)
}

// cpuTicks returns the process's user plus system time, in clock ticks.
func cpuTicks(t testing.TB, pid int) int64 {
	t.Helper()
	d, err := procstat.CPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	return int64(d / (10 * time.Millisecond))
}

// connsAllowed raises this process's RLIMIT_NOFILE (the daemons it starts
// inherit it) so that test and daemon can each hold want connections, as
// far as the hard limit, or the right to raise it, allows. It returns
// want, or fewer (at least 1,000, logged) on a machine that allows fewer.
func connsAllowed(t testing.TB, want int) int {
	t.Helper()
	const spare = 200 // listeners, logs, the test's own files
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	need := uint64(want + spare)
	switch {
	case rl.Cur >= need:
	case rl.Max >= need:
		rl.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			t.Fatal(err)
		}
	default:
		// Root (or CAP_SYS_RESOURCE) may raise the hard limit too.
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: need, Max: need}) != nil {
			rl.Cur = rl.Max
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.Cur >= need {
		return want
	}
	n := int(rl.Cur) - spare
	if n < 1000 {
		t.Fatalf("open-file limit %d allows only %d connections; want %d (ulimit -n)", rl.Cur, n, want)
	}
	t.Logf("open-file limit %d: %d connections instead of %d", rl.Cur, n, want)
	return n
}
