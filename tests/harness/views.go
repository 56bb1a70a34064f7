package harness

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
)

// This file owns what the cluster tests read of a running daemon through
// its admin endpoint: node id, peers view, a tag's bucket, gossip
// counters, the last report; and its log lines.

// NodeID is the daemon's gossip node id, from /v1/stats.
func (d *Daemon) NodeID(t *testing.T) string {
	t.Helper()
	code, body := HTTPDo(t, http.MethodGet, "http://"+d.AdminAddr(t)+"/v1/stats")
	var st struct{ Gossip struct{ Node string } }
	if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil || len(st.Gossip.Node) != 16 {
		t.Fatalf("/v1/stats: %d %v: %s", code, err, body)
	}
	return st.Gossip.Node
}

// AwaitPeer waits until the daemon's peers view holds node, silent or not
// as asked.
func (d *Daemon) AwaitPeer(t *testing.T, node string, silent bool) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("peer %s silent=%v in the peers view of %s", node, silent, d.Sock), func() bool {
		p, ok := d.Peers(t)[node]
		return ok && p.Silent == silent
	})
}

// LogLines returns the daemon's log lines that contain every one of parts.
func (d *Daemon) LogLines(parts ...string) []string {
	var out []string
next:
	for _, line := range strings.Split(d.Stderr.String(), "\n") {
		for _, p := range parts {
			if !strings.Contains(line, p) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
}

// peerView is one entry of /v1/peers.
type peerView struct {
	Silent    bool   `json:"silent"`
	Node      string `json:"node"`
	Addr      string `json:"addr"`
	LastHeard string `json:"last_heard"`
	Hits      uint64 `json:"hits"`
	Lost      uint64 `json:"lost"`
	Match     bool   `json:"fingerprint_match"`
	Relay     string `json:"relay"`
}

// Peers reads the daemon's /v1/peers, by node id.
func (d *Daemon) Peers(t *testing.T) map[string]peerView {
	t.Helper()
	code, body := HTTPDo(t, http.MethodGet, "http://"+d.AdminAddr(t)+"/v1/peers")
	var list []peerView
	if err := json.Unmarshal([]byte(body), &list); code != http.StatusOK || err != nil {
		t.Fatalf("/v1/peers: %d %v: %s", code, err, body)
	}
	out := make(map[string]peerView, len(list))
	for _, p := range list {
		out[p.Node] = p
	}
	return out
}

// tagView is /v1/tags/<tag>: a bucket read without spending it.
type tagView struct {
	Tracked    bool
	Tokens     float64
	Unreported uint64
}

func (d *Daemon) Tag(t *testing.T, tag string) tagView {
	t.Helper()
	code, body := HTTPDo(t, http.MethodGet, "http://"+d.AdminAddr(t)+"/v1/tags/"+tag)
	var v tagView
	if err := json.Unmarshal([]byte(body), &v); code != http.StatusOK || err != nil {
		t.Fatalf("/v1/tags/%s: %d %v: %s", tag, code, err, body)
	}
	return v
}

// gossipSeries are the /metrics series the fault tests read, by short name.
var gossipSeries = []struct{ name, family, label string }{
	{"sent", "dthrottle_gossip_packets_sent_total", ""},
	{"received", "dthrottle_gossip_packets_received_total", ""},
	{"lost", "dthrottle_gossip_packets_lost_total", ""},
	{"duplicate", "dthrottle_gossip_packets_dropped_total", "reason=duplicate"},
	{"auth", "dthrottle_gossip_packets_dropped_total", "reason=auth"},
	{"stale", "dthrottle_gossip_packets_dropped_total", "reason=stale"},
	{"malformed", "dthrottle_gossip_packets_dropped_total", "reason=malformed"},
	{"own", "dthrottle_gossip_own_packets_total", ""},
	{"requests", "dthrottle_gossip_repair_requests_total", ""},
	{"asked", "dthrottle_gossip_repair_asked_total", ""},
	{"repaired", "dthrottle_gossip_packets_repaired_total", ""},
	{"resent", "dthrottle_gossip_repair_answers_total", "result=resent"},
	{"suppressed", "dthrottle_gossip_repair_answers_total", "result=suppressed"},
	{"gone", "dthrottle_gossip_repair_answers_total", "result=gone"},
	{"refused", "dthrottle_gossip_repair_answers_total", "result=refused"},
	{"bytes", "dthrottle_gossip_bytes_sent_total", ""},
	{"mismatch", "dthrottle_gossip_fingerprint_mismatches_total", ""},
}

// Counters are gossip counters by short name, of one node or summed.
type Counters map[string]float64

// Totals reads the gossip counters of ds and sums them.
func Totals(t *testing.T, ds ...*Daemon) Counters {
	t.Helper()
	c := Counters{}
	for _, d := range ds {
		f := Scrape(t, d.AdminAddr(t))
		for _, s := range gossipSeries {
			if s.label == "" {
				c[s.name] += Metric(t, f, s.family)
			} else {
				c[s.name] += Metric(t, f, s.family, s.label)
			}
		}
	}
	return c
}

func (c Counters) String() string {
	parts := make([]string, len(gossipSeries))
	for i, s := range gossipSeries {
		parts[i] = fmt.Sprintf("%s %.0f", s.name, c[s.name])
	}
	return strings.Join(parts, ", ")
}

// LastReport is when the daemon last sent a report.
func (d *Daemon) LastReport(t *testing.T) time.Time {
	t.Helper()
	s := Metric(t, Scrape(t, d.AdminAddr(t)), "dthrottle_gossip_last_report_timestamp_seconds")
	return time.Unix(0, int64(s*1e9))
}
