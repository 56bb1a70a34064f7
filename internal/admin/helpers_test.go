package admin

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/gossip"
	"github.com/dthrottle/dthrottle/internal/ways/protocol"
	"github.com/dthrottle/dthrottle/internal/ways/serve"
)

// t0 is the fake clock's instant in tests that use newServer.
var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// fakeSnapshot is a daemon with known counters: 100 queries, 90 OK and 10
// NO over two policies (and so 0 empty tags), gossip on with two peers.
func fakeSnapshot() Snapshot {
	return Snapshot{
		Version: "1.2.3",
		Started: t0.Add(-12300 * time.Millisecond),
		Table:   bucket.Stats{Tags: 1234, Evictions: 5, EvictedHits: 7},
		Server:  protocol.Stats{Stats: serve.Stats{Active: 3, Accepted: 10, Rejected: 1}, Queries: 100, LineTooLong: 2},
		Policies: []bucket.PolicyStats{
			{Policy: bucket.Policy{Name: "default"}, OK: 60, NO: 8},
			{Policy: bucket.Policy{Name: "login"}, OK: 30, NO: 2},
		},
		Gossip: &Gossip{
			Node:    0x9f86d081884c7d65,
			Peers:   2,
			Members: gossip.Members{Live: 2, Missing: []uint64{0x2a}, Share: 0.75},
			Stats: gossip.Stats{
				PacketsSent:         11,
				BytesSent:           1100,
				PacketsReceived:     22,
				BytesReceived:       2200,
				DroppedAuth:         3,
				DroppedMalformed:    4,
				DroppedVersion:      5,
				DroppedDuplicate:    6,
				DroppedStale:        14,
				Own:                 8,
				Lost:                9,
				Repair:              gossip.RepairStats{Requests: 15, Asked: 16, Repaired: 17, Resent: 18, Suppressed: 19, Gone: 20, Refused: 21},
				FingerprintMismatch: 13,
				LastReport:          t0.Add(-400 * time.Millisecond),
				LastReportDuration:  1500 * time.Microsecond,
			},
		},
		Reloads:        4,
		ReloadFailures: 1,
	}
}

// fake records the calls the server makes to its Sources.
type fake struct {
	mu        sync.Mutex
	snap      Snapshot
	peers     []gossip.PeerInfo
	views     map[string]TagView
	tagged    []string // tags passed to Tag
	forgotten []string // tags passed to Forget
	snapshots atomic.Int64
}

func newFake() *fake {
	return &fake{snap: fakeSnapshot(), views: map[string]TagView{}}
}

func (f *fake) sources() Sources {
	return Sources{
		Snapshot: func() Snapshot {
			f.snapshots.Add(1)
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.snap
		},
		Peers: func() []gossip.PeerInfo {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.peers
		},
		Tag: func(tag string) TagView {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.tagged = append(f.tagged, tag)
			if v, ok := f.views[tag]; ok {
				return v
			}
			return TagView{Key: tag, Policy: "default", Action: "limit", Rate: 1, Burst: 10, Tokens: 10}
		},
		Forget: func(tag string) bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.forgotten = append(f.forgotten, tag)
			_, ok := f.views[tag]
			delete(f.views, tag)
			return ok
		},
	}
}

// forgetCalls returns the tags passed to Forget so far.
func (f *fake) forgetCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.forgotten)
}

// handler returns the handler of a server over src on the fake clock t0.
func handler(t *testing.T, src Sources) http.Handler {
	t.Helper()
	s, err := newServer(Config{Addr: "127.0.0.1:0"}, src, func() time.Time { return t0 })
	if err != nil {
		t.Fatal(err)
	}
	return s.Handler()
}

// do sends one request to h and returns the response and its body. The
// target is sent as written, escapes included.
func do(t *testing.T, h http.Handler, method, target string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	res := rec.Result()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(body)
}

// start runs a real server over src on 127.0.0.1:0 until the test ends,
// and checks that Serve returns nil after Close.
func start(t *testing.T, src Sources, log *slog.Logger) *Server {
	t.Helper()
	s, err := New(Config{Addr: "127.0.0.1:0", Logger: log}, src)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve after Close: %v", err)
		}
	})
	return s
}

// get fetches url over the network and returns the status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(body)
}
