package nginx

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// Asking over the worker's kept connection (contrib/nginx/module/
// ngx_http_dthrottle_conn.c): the asks of a worker pipelined on one
// connection to dthrottled, failed whole, a request gone giving up its
// place. The daemon's dthrottle_connections_accepted_total tells how many
// connections the worker made.

// ngxAnswer is what a request the test sent got.
type ngxAnswer struct {
	tag  string
	code int
	how  string // X-DThrottle
	took time.Duration
	err  error
}

// ngxGetAsync sends a request for tag and delivers what it got on ch.
func ngxGetAsync(s *harness.NgxModuleServer, tag string, ch chan<- ngxAnswer) {
	go func() {
		start := time.Now()
		res, err := harness.HSGet(s.URL, tag, true)
		if err != nil {
			ch <- ngxAnswer{tag: tag, err: err}
			return
		}
		ch <- ngxAnswer{tag, res.StatusCode, res.Header.Get("X-DThrottle"), time.Since(start), nil}
	}()
}

// acceptedConns returns how many connections d took on its socket.
func acceptedConns(t *testing.T, d *harness.Daemon) float64 {
	t.Helper()
	return harness.Metric(t, harness.Scrape(t, d.Admin), "dthrottle_connections_accepted_total")
}

// checkNgxAlive fails the test if nginx's error log shows a worker that
// died.
func checkNgxAlive(t *testing.T, s *harness.NgxModuleServer) {
	t.Helper()
	if log := s.Output(); strings.Contains(log, "exited on signal") || strings.Contains(log, " signal 11") {
		t.Errorf("a worker died:\n%s", log)
	}
}

// TestNginxModuleAskPipelined: 200 new tags, asked 16 at a time, are
// each answered as asked (ASKED_OK), then decided in process; the
// worker asked them over a connection it kept, not one each.
func TestNginxModuleAskPipelined(t *testing.T) {
	harness.RequireNginxModule(t)
	d := harness.StartDaemon(t, fmt.Sprintf(harness.SharedDaemonConfig, ""))
	s := harness.StartNginxModule(t, d.Sock)

	const tags, parallel = 200, 16
	accepted0 := acceptedConns(t, d)
	socket0, _ := harness.SharedCounts(t, d)
	next := make(chan int)
	answers := make(chan ngxAnswer, tags)
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				tag := fmt.Sprintf("pipelined-%d", i)
				res, err := harness.HSGet(s.URL, tag, true)
				if err != nil {
					answers <- ngxAnswer{tag: tag, err: err}
					continue
				}
				answers <- ngxAnswer{tag: tag, code: res.StatusCode, how: res.Header.Get("X-DThrottle")}
			}
		}()
	}
	for i := range tags {
		next <- i
	}
	close(next)
	wg.Wait()
	close(answers)
	for a := range answers {
		if a.err != nil || a.code != http.StatusOK || a.how != "ASKED_OK" {
			t.Errorf("new tag %s: %d, decided %q, %v; want 200, ASKED_OK", a.tag, a.code, a.how, a.err)
		}
	}
	if socket, _ := harness.SharedCounts(t, d); socket-socket0 != tags {
		t.Errorf("%d new tags: the daemon was asked %v over its socket, want %d", tags, socket-socket0, tags)
	}
	// The worker's kept connection: one, made at the first ask (another
	// only after a failure, and there is none).
	if got := acceptedConns(t, d) - accepted0; got > 2 {
		t.Errorf("%d asks: the daemon accepted %v connections, want 1 (a kept connection), 2 at most", tags, got)
	}
	if st := s.Stats(t); !strings.Contains(st, fmt.Sprintf("asked=%d asked_no=0 failed=0", tags)) || !strings.Contains(st, "asking=0") {
		t.Errorf("the worker's counters: %q, want asked=%d asked_no=0 failed=0, asking=0", st, tags)
	}
	// Inserted by the daemon: decided in process from now on.
	for _, i := range []int{0, tags / 2, tags - 1} {
		if codes, how := harness.NgxStatuses(t, s, fmt.Sprintf("pipelined-%d", i), 1); codes != "200" || how != "OK" {
			t.Errorf("pipelined-%d again: %s, decided %s; want 200, OK", i, codes, how)
		}
	}
	checkNgxAlive(t, s)
}

// TestNginxModuleAskHung: asks waiting on the kept connection of a
// daemon stopped (SIGSTOP) are all answered by the fail mode within
// about the timeout (500 ms), the first to time out failing them all;
// the daemon going on, new asks are answered again, over one new
// connection.
func TestNginxModuleAskHung(t *testing.T) {
	harness.RequireNginxModule(t)
	d := harness.StartDaemon(t, fmt.Sprintf(harness.SharedDaemonConfig, ""))
	s := harness.StartNginxModule(t, d.Sock, "dthrottle_timeout 2s;", "dthrottle_timeout 500ms;")
	if codes, how := harness.NgxStatuses(t, s, "hung-warm", 1); codes != "200" || how != "ASKED_OK" {
		t.Fatalf("a new tag: %s, decided %s; want 200, ASKED_OK", codes, how)
	}
	failed0 := s.StatsField(t, "failed")

	harness.StopDaemon(t, d)
	const waiting = 6
	answers := make(chan ngxAnswer, waiting)
	start := time.Now() // before the first ask, whose timeout begins the failure
	for i := range waiting {
		ngxGetAsync(s, fmt.Sprintf("hung-new-%d", i), answers)
	}
	// All waiting at once on the connection, unless the first timed out
	// already (a slow machine): then at least, all answered below.
	for deadline := start.Add(400 * time.Millisecond); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if s.StatsField(t, "asking") == waiting {
			break
		}
	}
	for range waiting {
		a := <-answers
		if a.err != nil || a.code != http.StatusOK || a.how != "FAILED_OPEN" || a.took > 2500*time.Millisecond {
			t.Errorf("%s, dthrottled stopped: %d, decided %q, after %v, %v; want 200, FAILED_OPEN, after the 500 ms timeout", a.tag, a.code, a.how, a.took, a.err)
		}
	}
	if took := time.Since(start); took < 400*time.Millisecond {
		t.Errorf("the asks of a stopped daemon answered after %v, before the timeout", took)
	}
	if got := s.StatsField(t, "failed") - failed0; got != waiting {
		t.Errorf("%d asks of a stopped daemon: %d answered by the fail mode, want %d", waiting, got, waiting)
	}
	if got := s.StatsField(t, "asking"); got != 0 {
		t.Errorf("asking=%d after every ask was answered, want 0", got)
	}

	harness.Must(t, d.Cmd.Process.Signal(syscall.SIGCONT))
	// After the backoff, an ask goes through, on a new connection (the
	// one that timed out is never used again).
	i := 0
	testkit.WaitFor(t, 10*time.Second, "a new tag asked and answered after SIGCONT", func() bool {
		i++
		res, _ := harness.NgxGet(t, s, s.URL, fmt.Sprintf("hung-after-%d", i))
		return res.Header.Get("X-DThrottle") == "ASKED_OK"
	})
	// The worker may attach again after that answer (the table left
	// while the daemon was stopped): let it, then count.
	harness.NgxStatuses(t, s, "hung-settle", 1)
	accepted0 := acceptedConns(t, d)
	answers = make(chan ngxAnswer, 10)
	for i := range 10 {
		ngxGetAsync(s, fmt.Sprintf("hung-again-%d", i), answers)
	}
	for range 10 {
		if a := <-answers; a.err != nil || a.code != http.StatusOK || a.how != "ASKED_OK" {
			t.Errorf("%s after SIGCONT: %d, decided %q, %v; want 200, ASKED_OK", a.tag, a.code, a.how, a.err)
		}
	}
	if got := acceptedConns(t, d) - accepted0; got > 1 {
		t.Errorf("10 asks after SIGCONT: the daemon accepted %v connections, want them on the connection kept since", got)
	}
	if log := s.Output(); !strings.Contains(log, "timed out") || !strings.Contains(log, "asking dthrottled") {
		t.Errorf("nginx's error log does not say the asks timed out and were answered again:\n%s", log)
	}
	checkNgxAlive(t, s)
}

// TestNginxModuleAskClientGone: a client goes away while its ask waits
// first on the kept connection, other asks behind it. Its place is given
// up, not the connection: its reply is read and dropped, and each of the
// others gets its own answer (a daemon sharing no table answers each, so
// a spent tag's NO and a new tag's OK alternate, and one reply out of
// step would swap them). nginx does not crash.
func TestNginxModuleAskClientGone(t *testing.T) {
	harness.RequireNginxModule(t)
	d := harness.StartDaemon(t, fmt.Sprintf(harness.SharedDaemonConfig, "share_table = false"))
	s := harness.StartNginxModule(t, d.Sock, "dthrottle_timeout 2s;", "dthrottle_timeout 30s;")
	if codes, how := harness.NgxStatuses(t, s, "spent", 4); codes != "200 200 200 429" || how != "ASKED_OK ASKED_OK ASKED_OK ASKED_NO" {
		t.Fatalf("spending a tag: %s, decided %s; want 200 200 200 429, all asked", codes, how)
	}
	accepted0 := acceptedConns(t, d)
	harness.StopDaemon(t, d)

	u, err := url.Parse(s.URL)
	harness.Must(t, err)
	c, err := net.Dial("tcp", u.Host)
	harness.Must(t, err)
	defer c.Close()
	fmt.Fprintf(c, "GET /hello.txt HTTP/1.1\r\nHost: %s\r\nX-Tag: gone\r\n\r\n", u.Host)
	testkit.WaitFor(t, 5*time.Second, "the worker to ask for the client that goes", func() bool { return s.StatsField(t, "asking") == 1 })

	// Behind it, in a known order: each waits before the next is sent.
	const behind = 10
	answers := make(chan ngxAnswer, behind)
	want := map[string]string{}
	for i := range behind {
		tag := fmt.Sprintf("fresh-%d", i)
		if i%2 == 0 {
			tag = "spent"
		}
		want[tag] = "200 ASKED_OK"
		if tag == "spent" {
			want[tag] = "429 ASKED_NO"
		}
		ngxGetAsync(s, tag, answers)
		testkit.WaitFor(t, 5*time.Second, fmt.Sprintf("ask %d to wait", i+2), func() bool { return s.StatsField(t, "asking") == i+2 })
	}
	c.Close()
	testkit.WaitFor(t, 5*time.Second, "the request gone to give up its place", func() bool { return s.StatsField(t, "asking") == behind })

	harness.Must(t, d.Cmd.Process.Signal(syscall.SIGCONT))
	for range behind {
		a := <-answers
		if got := fmt.Sprintf("%d %s", a.code, a.how); a.err != nil || got != want[a.tag] {
			t.Errorf("%s behind the request gone: %s, %v; want %s", a.tag, got, a.err, want[a.tag])
		}
	}
	// One connection for all of them, kept; another only if the worker
	// attached again meanwhile (every 10 s, a daemon sharing nothing).
	if got := acceptedConns(t, d) - accepted0; got > 1 {
		t.Errorf("%d asks: the daemon accepted %v connections, want none (the connection kept)", behind+1, got)
	}
	if st := s.Stats(t); !strings.Contains(st, "failed=0") || !strings.Contains(st, "asking=0") {
		t.Errorf("the worker's counters: %q, want failed=0 and asking=0", st)
	}
	// The worker serves on, on the same connection.
	if codes, how := harness.NgxStatuses(t, s, "after-gone", 1); codes != "200" || how != "ASKED_OK" {
		t.Errorf("a new tag after: %s, decided %s; want 200, ASKED_OK", codes, how)
	}
	checkNgxAlive(t, s)
}
