package admin

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip"
	"github.com/dthrottle/dthrottle/internal/gossip/relay"
	"github.com/dthrottle/dthrottle/internal/ways/protocol"
)

// checkJSON fails unless the response is status with exactly body (and a
// final newline) as JSON.
func checkJSON(t *testing.T, res *http.Response, body string, status int, want string) {
	t.Helper()
	if res.StatusCode != status {
		t.Errorf("status %d, want %d", res.StatusCode, status)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	if body != want+"\n" {
		t.Errorf("body\n%s\nwant\n%s", body, want)
	}
}

func TestHealthz(t *testing.T) {
	f := newFake()
	h := handler(t, f.sources())
	res, body := do(t, h, http.MethodGet, "/healthz")
	checkJSON(t, res, body, 200, `{"status":"ok","peers":2,"seconds_since_report":0.4}`)

	f.snap.Gossip.LastReport = time.Time{}
	res, body = do(t, h, http.MethodGet, "/healthz")
	checkJSON(t, res, body, 200, `{"status":"ok","peers":2}`)

	f.snap.Gossip = nil // gossip off
	res, body = do(t, h, http.MethodGet, "/healthz")
	checkJSON(t, res, body, 200, `{"status":"ok","peers":0}`)
}

func TestStats(t *testing.T) {
	f := newFake()
	f.snap.Gossip.Relay = relay.NodeStats{Mode: "serve", Relays: 1, RemoteRelays: 2, ViaRelays: 10, Direct: 1,
		ToRelayPackets: 3, ToRelayBytes: 300, AggregatePackets: 4, AggregateBytes: 400, CrossingPackets: 5, CrossingBytes: 500,
		ToRelayReceived: 6, ToRelayBytesReceived: 600, AggregatesReceived: 7, AggregateBytesReceived: 700,
		CrossingsReceived: 8, CrossingBytesReceived: 800, ForeignHits: 9, RemoteSilences: 1, OwnPending: 2, OwnForgotten: 3,
		Sum: relay.Stats{HeldTags: 4, HeldHits: 5, HotTags: 6, Passed: 7, Dropped: 8}}
	relay := `"relay":{"mode":"serve","relays":1,"remote_relays":2,"reports_via_relays":10,"reports_direct":1,` +
		`"sent":{"aggregate":{"packets":4,"bytes":400},"crossing":{"packets":5,"bytes":500},"to_relay":{"packets":3,"bytes":300}},` +
		`"received":{"aggregate":{"packets":7,"bytes":700},"crossing":{"packets":8,"bytes":800},"to_relay":{"packets":6,"bytes":600}},` +
		`"own_pending":2,"own_forgotten":3,"held_tags":4,"held_hits":5,"hot_tags":6,"passed_hits":7,"dropped_hits":8,"foreign_hits":9,"remote_silences":1,"crossings_lost":0}`
	h := handler(t, f.sources())
	res, body := do(t, h, http.MethodGet, "/v1/stats")
	checkJSON(t, res, body, 200, `{"version":"1.2.3","uptime_seconds":12.3,"tags":1234,"evictions":5,"evicted_hits":7,`+
		`"connections":{"active":3,"accepted":10,"rejected":1},`+
		`"queries":{"total":100,"ok":90,"no":10,"line_too_long":2},`+
		`"policies":[{"name":"default","action":"limit","ok":60,"no":8},{"name":"login","action":"limit","ok":30,"no":2}],`+
		`"gossip":{"enabled":true,"node":"9f86d081884c7d65","packets_sent":11,"bytes_sent":1100,"packets_received":22,"bytes_received":2200,`+
		`"dropped":{"auth":3,"malformed":4,"version":5,"duplicate":6,"stale":14},"lost":9,"repair":{"requests":15,"asked":16,"repaired":17,"resent":18,"suppressed":19,"gone":20,"refused":21},"fingerprint_mismatch":13,"peers":2,"peers_missing":1,"share":0.75,`+
		strings.Replace(warmZero, `},"learned"`, `},`+relay+`,"learned"`, 1)+`}}`)

	// Gossip off, no policies, empty tags only: the same shape, zeroed.
	f.snap = Snapshot{Version: "dev", Server: protocol.Stats{Queries: 4}}
	res, body = do(t, h, http.MethodGet, "/v1/stats")
	checkJSON(t, res, body, 200, `{"version":"dev","uptime_seconds":0,"tags":0,"evictions":0,"evicted_hits":0,`+
		`"connections":{"active":0,"accepted":0,"rejected":0},`+
		`"queries":{"total":4,"ok":0,"no":0,"line_too_long":0},"policies":[],`+
		`"gossip":{"enabled":false,"node":"","packets_sent":0,"bytes_sent":0,"packets_received":0,"bytes_received":0,`+
		`"dropped":{"auth":0,"malformed":0,"version":0,"duplicate":0,"stale":0},"lost":0,"repair":{"requests":0,"asked":0,"repaired":0,"resent":0,"suppressed":0,"gone":0,"refused":0},"fingerprint_mismatch":0,"peers":0,"peers_missing":0,"share":1,`+warmZero+`}}`)
}

// warmZero is the gossip.warm object of a node that neither asked nor
// answered.
const warmZero = `"warm":{"warming":false,"warm":false,"seconds":0,"requests_sent":0,"requests_received":0,"requests_refused":0,` +
	`"answers_sent":0,"answer_bytes_sent":0,"tags_sent":0,"answers_received":0,"answer_bytes_received":0,"tags_received":0,` +
	`"tags_adopted":0,"peers_answered":0,"dropped_unasked":0,"dropped_duplicate":0},"learned":0,"learned_total":0,"forgotten":0,"refused":0`

func TestPeers(t *testing.T) {
	f := newFake()
	h := handler(t, f.sources())
	res, body := do(t, h, http.MethodGet, "/v1/peers")
	checkJSON(t, res, body, 200, `[]`)

	f.peers = []gossip.PeerInfo{
		{Node: 0x9f86d081884c7d65, Addr: "10.0.0.2:7777", FirstHeard: t0.Add(-time.Hour), LastHeard: t0.Add(-250 * time.Millisecond),
			Packets: 123, Hits: 4567, FingerprintMatch: true, Delay: 20 * time.Millisecond, Behind: 1020 * time.Millisecond},
		{Node: 0x2a, Addr: "10.0.0.3:7777", FirstHeard: t0.In(time.FixedZone("X", 3600)), LastHeard: t0,
			Lost: 4, Repaired: 3, Duplicates: 1, Silent: true, Missing: true},
	}
	res, body = do(t, h, http.MethodGet, "/v1/peers")
	checkJSON(t, res, body, 200, `[{"node":"9f86d081884c7d65","addr":"10.0.0.2:7777","first_heard":"2026-01-01T11:00:00Z","last_heard":"2026-01-01T11:59:59.75Z",`+
		`"packets":123,"hits":4567,"lost":0,"repaired":0,"duplicates":0,"fingerprint_match":true,"silent":false,"delay_seconds":0.02,"behind_seconds":1.02},`+
		`{"node":"000000000000002a","addr":"10.0.0.3:7777","first_heard":"2026-01-01T12:00:00Z","last_heard":"2026-01-01T12:00:00Z",`+
		`"packets":0,"hits":0,"lost":4,"repaired":3,"duplicates":1,"fingerprint_match":false,"silent":true,"missing":true,"delay_seconds":0,"behind_seconds":0}]`)

	// Gossip off: no Peers function at all.
	src := f.sources()
	src.Peers = nil
	res, body = do(t, handler(t, src), http.MethodGet, "/v1/peers")
	checkJSON(t, res, body, 200, `[]`)
}

func TestTagView(t *testing.T) {
	f := newFake()
	f.views["1.2.3.4"] = TagView{Key: "1.2.3.4", Tracked: true, Policy: "default", Action: "limit", Rate: 1, Burst: 10, Tokens: 3.5, Unreported: 2}
	f.views["login:bob"] = TagView{Key: "login:bob", Tracked: true, Policy: "login", Action: "limit", Rate: 0.2, Burst: 5, Tokens: -2.25}
	f.views["long"] = TagView{Key: "lo\x00\xff\xfe", Tracked: true, Policy: "default", Action: "limit", Rate: 1, Burst: 10, Tokens: 9}
	h := handler(t, f.sources())
	for _, c := range []struct{ target, want string }{
		{"/v1/tags/1.2.3.4", `{"tag":"1.2.3.4","key":"1.2.3.4","tracked":true,"policy":"default","action":"limit","rate":1,"burst":10,"tokens":3.5,"debt":0,"unreported":2}`},
		{"/v1/tags/login:bob", `{"tag":"login:bob","key":"login:bob","tracked":true,"policy":"login","action":"limit","rate":0.2,"burst":5,"tokens":-2.25,"debt":2.25,"unreported":0}`},
		{"/v1/tags/5.6.7.8", `{"tag":"5.6.7.8","key":"5.6.7.8","tracked":false,"policy":"default","action":"limit","rate":1,"burst":10,"tokens":10,"debt":0,"unreported":0}`},
		{"/v1/tags/long", `{"tag":"long","key":"lo\u0000\\xff\\xfe","tracked":true,"policy":"default","action":"limit","rate":1,"burst":10,"tokens":9,"debt":0,"unreported":0}`},
		{"/v1/tags/a%ffb", `{"tag":"a\\xffb","key":"a\\xffb","tracked":false,"policy":"default","action":"limit","rate":1,"burst":10,"tokens":10,"debt":0,"unreported":0}`},
	} {
		res, body := do(t, h, http.MethodGet, c.target)
		checkJSON(t, res, body, 200, c.want)
	}
	if want := []string{"1.2.3.4", "login:bob", "5.6.7.8", "long", "a\xffb"}; !slices.Equal(f.tagged, want) {
		t.Errorf("Tag called with %q, want %q", f.tagged, want)
	}
}

// The tag is the rest of the path, percent-decoded, whatever its slashes
// and dots; ServeMux's redirects to a cleaned path (another tag) never
// happen.
func TestTagPaths(t *testing.T) {
	for _, c := range []struct{ target, tag string }{
		{"/v1/tags/a/b", "a/b"},
		{"/v1/tags/a%2Fb", "a/b"},
		{"/v1/tags/login:bob/x/", "login:bob/x/"},
		{"/v1/tags/%2Fx", "/x"},
		{"/v1/tags//x", "/x"},
		{"/v1/tags/a//b", "a//b"},
		{"/v1/tags/a/../b", "a/../b"},
		{"/v1/tags/./a", "./a"},
		{"/v1/tags/..", ".."},
		{"/v1/tags/%2e", "."},
		{"/v1/tags/100%25%20sure%3F", "100% sure?"},
		{"/v1/tags/caf%C3%A9", "café"},
		{"/v1/tags/a+b", "a+b"},
	} {
		for _, method := range []string{http.MethodGet, http.MethodDelete} {
			f := newFake()
			res, body := do(t, handler(t, f.sources()), method, c.target)
			if res.StatusCode != 200 {
				t.Errorf("%s %s: %d %s", method, c.target, res.StatusCode, body)
				continue
			}
			got := f.tagged
			if method == http.MethodDelete {
				got = f.forgotten
			}
			if !slices.Equal(got, []string{c.tag}) {
				t.Errorf("%s %s: source called with %q, want [%q]", method, c.target, got, c.tag)
			}
		}
	}
}

func TestForget(t *testing.T) {
	f := newFake()
	f.views["a/b"] = TagView{Key: "a/b", Tracked: true}
	h := handler(t, f.sources())
	res, body := do(t, h, http.MethodDelete, "/v1/tags/a%2Fb")
	checkJSON(t, res, body, 200, `{"tag":"a/b","forgotten":true}`)
	res, body = do(t, h, http.MethodDelete, "/v1/tags/a/b")
	checkJSON(t, res, body, 200, `{"tag":"a/b","forgotten":false}`)
	if want := []string{"a/b", "a/b"}; !slices.Equal(f.forgotten, want) {
		t.Errorf("Forget called with %q, want %q", f.forgotten, want)
	}
	if len(f.tagged) != 0 {
		t.Errorf("DELETE called Tag: %q", f.tagged)
	}
}

func TestEmptyTag(t *testing.T) {
	f := newFake()
	h := handler(t, f.sources())
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		res, body := do(t, h, method, "/v1/tags/")
		checkJSON(t, res, body, 400, `{"error":"empty tag: want /v1/tags/{tag}"}`)
	}
	if len(f.tagged)+len(f.forgotten) != 0 {
		t.Errorf("sources called for an empty tag: %q %q", f.tagged, f.forgotten)
	}
}

func TestMethodsAndPaths(t *testing.T) {
	f := newFake()
	h := handler(t, f.sources())
	for _, c := range []struct {
		method, target string
		status         int
		allow, body    string
	}{
		{"POST", "/metrics", 405, "GET, HEAD", `{"error":"method POST not allowed"}`},
		{"DELETE", "/healthz", 405, "GET, HEAD", `{"error":"method DELETE not allowed"}`},
		{"PUT", "/v1/stats", 405, "GET, HEAD", `{"error":"method PUT not allowed"}`},
		{"POST", "/v1/peers", 405, "GET, HEAD", `{"error":"method POST not allowed"}`},
		{"POST", "/v1/tags/x", 405, "DELETE, GET, HEAD", `{"error":"method POST not allowed"}`},
		{"PUT", "/v1/tags/a//b", 405, "DELETE, GET, HEAD", `{"error":"method PUT not allowed"}`},
		{"POST", "/", 405, "GET, HEAD", `{"error":"method POST not allowed"}`}, // the status page
		{"POST", "/v1/top", 405, "GET, HEAD", `{"error":"method POST not allowed"}`},
		{"GET", "/index.html", 404, "", `{"error":"not found"}`},
		{"GET", "/nope", 404, "", `{"error":"not found"}`},
		{"GET", "/metrics/x", 404, "", `{"error":"not found"}`},
		{"GET", "/v1/tag/x", 404, "", `{"error":"not found"}`},
		{"DELETE", "/v1/stats/x", 404, "", `{"error":"not found"}`},
	} {
		res, body := do(t, h, c.method, c.target)
		if res.StatusCode != c.status || res.Header.Get("Allow") != c.allow || body != c.body+"\n" {
			t.Errorf("%s %s: %d Allow %q %s, want %d Allow %q %s", c.method, c.target,
				res.StatusCode, res.Header.Get("Allow"), body, c.status, c.allow, c.body)
		}
	}
	if len(f.forgotten) != 0 {
		t.Errorf("Forget called: %q", f.forgotten)
	}
}

func TestHead(t *testing.T) {
	h := handler(t, newFake().sources())
	for _, target := range []string{"/metrics", "/healthz", "/v1/stats", "/v1/peers", "/v1/tags/x"} {
		if res, _ := do(t, h, http.MethodHead, target); res.StatusCode != 200 {
			t.Errorf("HEAD %s: %d", target, res.StatusCode)
		}
	}
}
