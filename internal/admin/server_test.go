package admin

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dthrottle/dthrottle/internal/logtest"
	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Over a real listener: the endpoints answer, /metrics parses, and no
// request is logged, even at debug level.
func TestServeOverTCP(t *testing.T) {
	var logs logtest.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f := newFake()
	s := start(t, f.sources(), log)
	base := "http://" + s.Addr().String()

	status, body := get(t, base+"/metrics")
	if status != 200 {
		t.Fatalf("GET /metrics: %d %s", status, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if got := fams["go_goroutines"].GetMetric(); len(got) != 1 {
		t.Errorf("go_goroutines: %d series, want 1", len(got))
	}

	status, body = get(t, base+"/healthz")
	if status != 200 || !strings.HasPrefix(body, `{"status":"ok","peers":2,"seconds_since_report":`) {
		t.Errorf("GET /healthz: %d %s", status, body)
	}
	status, body = get(t, base+"/v1/tags/a%2Fb")
	if status != 200 || !strings.HasPrefix(body, `{"tag":"a/b",`) {
		t.Errorf("GET /v1/tags/a%%2Fb: %d %s", status, body)
	}
	req, err := http.NewRequest(http.MethodDelete, base+"/v1/tags/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if got := f.forgetCalls(); res.StatusCode != 200 || !slices.Equal(got, []string{"x"}) {
		t.Errorf("DELETE /v1/tags/x: %d, Forget called with %q", res.StatusCode, got)
	}
	http.DefaultClient.CloseIdleConnections()
	if logs.String() != "" {
		t.Errorf("requests logged:\n%s", logs.String())
	}
}

func TestNewBusyPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s, err := New(Config{Addr: ln.Addr().String()}, newFake().sources())
	if err == nil {
		s.Close()
		t.Fatalf("New on busy %s: no error", ln.Addr())
	}
	if want := "admin: listening on " + ln.Addr().String(); !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q, want it to start %q", err, want)
	}
}

func TestNewMisuse(t *testing.T) {
	full := newFake().sources()
	for _, c := range []struct {
		cfg  Config
		edit func(*Sources)
		want string
	}{
		{Config{}, func(*Sources) {}, "admin: Config.Addr is required"},
		{Config{Addr: "127.0.0.1:0"}, func(s *Sources) { s.Snapshot = nil }, "admin: Sources.Snapshot is required"},
		{Config{Addr: "127.0.0.1:0"}, func(s *Sources) { s.Tag = nil }, "admin: Sources.Tag is required"},
		{Config{Addr: "127.0.0.1:0"}, func(s *Sources) { s.Forget = nil }, "admin: Sources.Forget is required"},
	} {
		src := full
		c.edit(&src)
		s, err := New(c.cfg, src)
		if err == nil {
			s.Close()
			t.Errorf("want error %q, got none", c.want)
		} else if err.Error() != c.want {
			t.Errorf("error %q, want %q", err, c.want)
		}
	}
}

func TestCloseTwice(t *testing.T) {
	s, err := New(Config{Addr: "127.0.0.1:0"}, newFake().sources())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	// Serve is running once a request gets an answer.
	if status, body := get(t, "http://"+s.Addr().String()+"/healthz"); status != 200 {
		t.Fatalf("GET /healthz: %d %s", status, body)
	}
	http.DefaultClient.CloseIdleConnections()
	for i := range 2 {
		if err := s.Close(); err != nil {
			t.Errorf("Close %d: %v", i+1, err)
		}
	}
	if err := testkit.Recv(t, done, 10*time.Second, "Serve to return after Close"); err != nil {
		t.Errorf("Serve after Close: %v", err)
	}
	if _, err := net.Dial("tcp", s.Addr().String()); err == nil {
		t.Error("port still accepting after Close")
	}
}

// Close before Serve releases the port, and Serve then returns nil at once.
func TestCloseBeforeServe(t *testing.T) {
	s, err := New(Config{Addr: "127.0.0.1:0"}, newFake().sources())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", s.Addr().String())
	if err != nil {
		t.Fatalf("port not released: %v", err)
	}
	ln.Close()
	if err := s.Serve(); err != nil {
		t.Errorf("Serve after Close: %v", err)
	}
}

// TestCloseCutsStuckRequest, on fake time: Close cuts a connection still
// busy when the grace period ends, exactly then, rather than waiting for
// it, and Serve returns.
func TestCloseCutsStuckRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		entered, release := make(chan struct{}), make(chan struct{})
		defer close(release)
		src := newFake().sources()
		src.Snapshot = func() Snapshot {
			close(entered)
			<-release
			return Snapshot{}
		}
		s, err := newServer(Config{Addr: "127.0.0.1:0"}, src, time.Now)
		if err != nil {
			t.Fatal(err)
		}
		l := testkit.NewListener()
		s.listenOn(l, src)
		done := make(chan error, 1)
		go func() { done <- s.Serve() }()
		tr := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return l.Dial() }}
		defer tr.CloseIdleConnections()
		reqErr := make(chan error, 1)
		go func() {
			res, err := (&http.Client{Transport: tr}).Get("http://127.0.0.1/healthz")
			if err == nil {
				res.Body.Close()
				err = errors.New("got an answer")
			}
			reqErr <- err
		}()
		<-entered
		closing := time.Now()
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if took := time.Since(closing); took != closeGrace {
			t.Errorf("Close returned after %v, want the grace (%v)", took, closeGrace)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve after Close: %v", err)
		}
		if err := <-reqErr; err == nil {
			t.Error("stuck request not cut")
		}
	})
}

func TestWarnIfExposed(t *testing.T) {
	for _, c := range []struct {
		ip   net.IP
		warn bool
	}{
		{net.IPv4(127, 0, 0, 1), false},
		{net.IPv6loopback, false},
		{net.IPv4zero, true},
		{net.IPv6unspecified, true},
		{net.IPv4(10, 0, 0, 2), true},
	} {
		var logs logtest.Buffer
		warnIfExposed(slog.New(slog.NewTextHandler(&logs, nil)), &net.TCPAddr{IP: c.ip, Port: 7071})
		got := strings.Contains(logs.String(), "level=WARN msg=\"admin endpoint reachable from other hosts")
		if got != c.warn {
			t.Errorf("%v: warned %v, want %v: %s", c.ip, got, c.warn, logs.String())
		}
	}
}

// The listener binds the configured loopback address only, and says
// nothing about it.
func TestNewLoopbackQuiet(t *testing.T) {
	var logs logtest.Buffer
	s := start(t, newFake().sources(), slog.New(slog.NewTextHandler(&logs, nil)))
	if a := s.Addr().(*net.TCPAddr); !a.IP.Equal(net.IPv4(127, 0, 0, 1)) || a.Port == 0 {
		t.Errorf("Addr %v, want 127.0.0.1 and a port", a)
	}
	if logs.String() != "" {
		t.Errorf("logged:\n%s", logs.String())
	}
}

// TestLoopbackHostsOnly: on a loopback address, a request naming another
// host (as a DNS-rebound page would) is refused.
func TestLoopbackHostsOnly(t *testing.T) {
	s := start(t, newFake().sources(), nil)
	for host, want := range map[string]int{
		s.Addr().String():        http.StatusOK,
		"localhost:7071":         http.StatusOK,
		"[::1]:7071":             http.StatusOK,
		"evil.example:7071":      http.StatusForbidden,
		"127.0.0.1.evil.example": http.StatusForbidden,
	} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+s.Addr().String()+"/healthz", nil)
		req.Host = host
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("Host %q: %d, want %d", host, res.StatusCode, want)
		}
	}
}

// TestPprof serves Go's profiles only when Config.Pprof is set.
func TestPprof(t *testing.T) {
	for _, on := range []bool{false, true} {
		s, err := newServer(Config{Addr: "127.0.0.1:0", Pprof: on}, newFake().sources(), func() time.Time { return t0 })
		if err != nil {
			t.Fatal(err)
		}
		res, body := do(t, s.Handler(), http.MethodGet, "/debug/pprof/goroutine?debug=1")
		if got := res.StatusCode == http.StatusOK && strings.Contains(body, "goroutine profile:"); got != on {
			t.Errorf("pprof %v: GET /debug/pprof/goroutine gave %d %.60q", on, res.StatusCode, body)
		}
	}
}
