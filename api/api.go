// Package api holds the JSON documents of dthrottled's admin endpoint,
// field for field: the admin package serves them and the dthrottle command
// reads them. It has no dependencies, so a client need not link the
// server. Fields are only ever added.
package api

import "time"

// Health is GET /healthz.
type Health struct {
	Status string `json:"status"` // "ok"
	Peers  int    `json:"peers"`  // peers heard and not silent
	// SecondsSinceReport is the time since the last gossip report was sent;
	// nil when gossip is off or before the first report.
	SecondsSinceReport *float64 `json:"seconds_since_report,omitempty"`
}

// Peer is one element of GET /v1/peers.
type Peer struct {
	Node             string    `json:"node"` // 16 hex digits
	Addr             string    `json:"addr"`
	FirstHeard       time.Time `json:"first_heard"` // RFC 3339, UTC
	LastHeard        time.Time `json:"last_heard"`
	Packets          uint64    `json:"packets"`
	Hits             uint64    `json:"hits"`
	Lost             uint64    `json:"lost"`     // datagrams missing from its sequence, not repaired
	Repaired         uint64    `json:"repaired"` // datagrams that arrived after this node asked for them again
	Duplicates       uint64    `json:"duplicates"`
	FingerprintMatch bool      `json:"fingerprint_match"`
	Silent           bool      `json:"silent"`
	// Found says how this node came to send to the peer: "configured",
	// "resolved" (a name in gossip.peers), "learned" or "multicast"; empty
	// when it does not send to it (heard, learning off).
	Found string `json:"found,omitempty"`
	// Relay is "segment" for a relay of this node's segment, "remote" for
	// a relay of another segment; empty for a node.
	Relay string `json:"relay,omitempty"`
	// Relayed says the peer reports through relays when it hears one, so
	// that its silence is expected.
	Relayed bool `json:"relayed,omitempty"`
	// Missing: silent, neither said goodbye nor forgotten, so out of this
	// node's share of the rate (Gossip.Share). Left: said goodbye.
	Missing bool `json:"missing,omitempty"`
	Left    bool `json:"left,omitempty"`
	// DelaySeconds is its last datagram's arrival here less its send
	// time (its clock; 0 when that is ahead of ours); BehindSeconds adds
	// one report interval, the longest a hit waits for its report: how far
	// behind the peer's hits can be when applied here.
	DelaySeconds  float64 `json:"delay_seconds"`
	BehindSeconds float64 `json:"behind_seconds"`
}

// Tag is GET /v1/tags/{tag}.
type Tag struct {
	Tag        string  `json:"tag"`
	Key        string  `json:"key"` // the table's key: the tag, or its digest form
	Tracked    bool    `json:"tracked"`
	Policy     string  `json:"policy"`
	Action     string  `json:"action"`
	Rate       float64 `json:"rate"`
	Burst      int     `json:"burst"`
	Tokens     float64 `json:"tokens"`
	Debt       float64 `json:"debt"` // max(0, -tokens)
	Unreported uint64  `json:"unreported"`
	// DryRun: the policy serves what its limit refuses; DryRunRefused
	// counts, over the whole policy, the queries it would have refused.
	DryRun        bool   `json:"dry_run,omitempty"`
	DryRunRefused uint64 `json:"dry_run_refused,omitempty"`
}

// Forget is DELETE /v1/tags/{tag}.
type Forget struct {
	Tag       string `json:"tag"`
	Forgotten bool   `json:"forgotten"` // false: it was not tracked
}

// Stats is GET /v1/stats.
type Stats struct {
	Version       string      `json:"version"`
	UptimeSeconds float64     `json:"uptime_seconds"`
	Tags          int         `json:"tags"`
	Evictions     uint64      `json:"evictions"`
	EvictedHits   uint64      `json:"evicted_hits"`
	Connections   Connections `json:"connections"`
	Queries       Queries     `json:"queries"`
	Policies      []Policy    `json:"policies"`
	Gossip        Gossip      `json:"gossip"`
	HTTP          *HTTP       `json:"http,omitempty"`  // nil when the HTTP decision endpoint is off
	State         *State      `json:"state,omitempty"` // nil when state.file is off
}

// State is what the state file did in this process: read back on start,
// written on a clean stop.
type State struct {
	Loaded         bool    `json:"loaded"`
	Ignored        string  `json:"ignored,omitempty"` // why a file was not read back: corrupt, stale, ...
	LoadTags       int     `json:"load_tags"`
	LoadAdopted    int     `json:"load_adopted"` // buckets the file lowered
	LoadBytes      int64   `json:"load_bytes"`
	LoadSeconds    float64 `json:"load_seconds"`
	LoadAgeSeconds float64 `json:"load_age_seconds"` // how long before the start the file was written
	Saved          bool    `json:"saved"`
	SaveFailure    string  `json:"save_failure,omitempty"`
	SaveTags       int     `json:"save_tags"`
	SaveBytes      int64   `json:"save_bytes"`
	SaveSeconds    float64 `json:"save_seconds"`
}

// Warm is the warm start from peers: this node's request and the answers
// it merged, and the answers it sent to others.
type Warm struct {
	Warming             bool    `json:"warming"` // asked, not yet done
	Warm                bool    `json:"warm"`    // done
	Seconds             float64 `json:"seconds"` // from the request to done
	RequestsSent        uint64  `json:"requests_sent"`
	RequestsReceived    uint64  `json:"requests_received"`
	RequestsRefused     uint64  `json:"requests_refused"`
	AnswersSent         uint64  `json:"answers_sent"` // datagrams
	AnswerBytesSent     uint64  `json:"answer_bytes_sent"`
	TagsSent            uint64  `json:"tags_sent"`
	AnswersReceived     uint64  `json:"answers_received"` // datagrams merged
	AnswerBytesReceived uint64  `json:"answer_bytes_received"`
	TagsReceived        uint64  `json:"tags_received"`
	TagsAdopted         uint64  `json:"tags_adopted"` // buckets an answer lowered
	PeersAnswered       uint64  `json:"peers_answered"`
	DroppedUnasked      uint64  `json:"dropped_unasked"`
	DroppedDuplicate    uint64  `json:"dropped_duplicate"`
}

// HTTP counts the HTTP decision endpoint's requests and connections.
type HTTP struct {
	Allowed  uint64 `json:"allowed"`  // answered 2xx, dry runs included
	Refused  uint64 `json:"refused"`  // answered the refusal status
	Bad      uint64 `json:"bad"`      // answered 4xx for their form
	Active   uint64 `json:"active"`   // connections open
	Accepted uint64 `json:"accepted"` // connections taken into service
	Rejected uint64 `json:"rejected"` // connections refused over max_conns (answered 503, or closed past 64 such answers in flight)
}

// Connections are the query server's connection counts.
type Connections struct {
	Active   uint64 `json:"active"`
	Accepted uint64 `json:"accepted"`
	Rejected uint64 `json:"rejected"`
}

// Queries counts requests. OK and NO are sums over the policies; Total
// also counts empty tags, answered OK without a policy.
type Queries struct {
	Total       uint64 `json:"total"`
	OK          uint64 `json:"ok"`
	NO          uint64 `json:"no"`
	LineTooLong uint64 `json:"line_too_long"`
}

// Policy counts the queries one policy answered.
type Policy struct {
	Name          string `json:"name"`
	Action        string `json:"action"`
	OK            uint64 `json:"ok"`
	NO            uint64 `json:"no"`
	DryRun        bool   `json:"dry_run,omitempty"`
	DryRunRefused uint64 `json:"dry_run_refused,omitempty"` // of OK, what the limit would have refused
}

// Gossip are the counters between peers; all zero when Enabled is false.
type Gossip struct {
	Enabled             bool    `json:"enabled"`
	Node                string  `json:"node"`
	PacketsSent         uint64  `json:"packets_sent"`
	BytesSent           uint64  `json:"bytes_sent"`
	PacketsReceived     uint64  `json:"packets_received"`
	BytesReceived       uint64  `json:"bytes_received"`
	Dropped             Dropped `json:"dropped"`
	Lost                uint64  `json:"lost"`
	Repair              Repair  `json:"repair"`
	FingerprintMismatch uint64  `json:"fingerprint_mismatch"`
	Peers               int     `json:"peers"`
	// PeersMissing are the peers silent, neither gone nor forgotten;
	// Share is this node's share of the cluster, (1 + live) / (1 + live
	// + missing), which policies under partition "share" hold.
	PeersMissing int     `json:"peers_missing"`
	Share        float64 `json:"share"`
	Warm         Warm    `json:"warm"`
	Relay        *Relay  `json:"relay,omitempty"`
	// Learned are the unicast peers learned now; LearnedTotal, Forgotten and
	// Refused count those learned, dropped once silent, and not learned for
	// max_peers over the process's life.
	Learned      int    `json:"learned"`
	LearnedTotal uint64 `json:"learned_total"`
	Forgotten    uint64 `json:"forgotten"`
	Refused      uint64 `json:"refused"`
}

// Dropped counts datagrams dropped, by reason.
type Dropped struct {
	Auth      uint64 `json:"auth"`
	Malformed uint64 `json:"malformed"`
	Version   uint64 `json:"version"`
	Duplicate uint64 `json:"duplicate"`
	Stale     uint64 `json:"stale"`
}

// Error is the body of every error response.
type Error struct {
	Error string `json:"error"`
}

// Relay is relaying (relay.mode): what this node sent through relays and
// received from them and, on a relay, its sums.
type Relay struct {
	Mode         string `json:"mode"`          // "off", "use" or "serve"
	Relays       int    `json:"relays"`        // this segment's relays heard now, this one apart
	RemoteRelays int    `json:"remote_relays"` // other segments' relays heard now
	// Reports sent through relays, and to every peer for want of one.
	ReportsViaRelays uint64 `json:"reports_via_relays"`
	ReportsDirect    uint64 `json:"reports_direct"`
	// Datagrams and bytes by kind: "to_relay" (hits for a relay),
	// "aggregate" (a relay's sums for its segment), "crossing" (a relay's
	// sums for other segments).
	Sent     map[string]Traffic `json:"sent"`
	Received map[string]Traffic `json:"received"`
	// OwnPending is tags whose hits sent to a relay have not come back;
	// OwnForgotten the hits that did not within the forget time.
	OwnPending   int    `json:"own_pending"`
	OwnForgotten uint64 `json:"own_forgotten"`
	// A relay's sums: held now, passed on, dropped as too sparse to
	// matter, and other segments' hits passed into this one.
	HeldTags       int    `json:"held_tags"`
	HeldHits       uint64 `json:"held_hits"`
	HotTags        int    `json:"hot_tags"`
	PassedHits     uint64 `json:"passed_hits"`
	DroppedHits    uint64 `json:"dropped_hits"`
	ForeignHits    uint64 `json:"foreign_hits"`
	RemoteSilences uint64 `json:"remote_silences"`
	CrossingsLost  uint64 `json:"crossings_lost"`
}

// Traffic is datagrams and their bytes.
type Traffic struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// Top is GET /v1/top: per policy, the tags with the most refusals, or the
// most hits served, over the last Window, as this node or the whole
// cluster counts them. Query parameters: by (refused, the default, or
// served), scope (cluster, the default, or node), policy (one policy's
// name; all when absent), n (tags per policy, 1 to 100, default 20).
//
// Counts come from heavy-hitter sketches of a fixed size: a tag's true
// count is at most Count and at least Count-Error, and a tag missing from
// the list had at most Policy.Bound in the window.
type Top struct {
	By            string      `json:"by"`    // "refused" or "served"
	Scope         string      `json:"scope"` // "cluster" or "node"
	WindowSeconds float64     `json:"window_seconds"`
	Nodes         int         `json:"nodes"` // nodes whose counts are in (1 for scope node)
	Policies      []TopPolicy `json:"policies"`
}

// Find returns tag's entry in the list of policy, and whether the list
// holds it.
func (t Top) Find(policy, tag string) (TopTag, bool) {
	for _, p := range t.Policies {
		if p.Policy != policy {
			continue
		}
		for _, tt := range p.Tags {
			if tt.Tag == tag {
				return tt, true
			}
		}
	}
	return TopTag{}, false
}

// TopPolicy is one policy's heaviest tags in Top, heaviest first.
type TopPolicy struct {
	Policy string `json:"policy"`
	// Total is every refusal (or served hit) of the policy in the window,
	// over the nodes counted.
	Total uint64 `json:"total"`
	// Bound is the most a tag left out of Tags may have had.
	Bound uint64   `json:"bound"`
	Tags  []TopTag `json:"tags"`
}

// TopTag is one tag of a TopPolicy. Tag is the table's key for it: the tag
// as sent, or the digest form of a tag over max_tag_bytes; it is any
// bytes, shown as a JSON string: itself when it is valid UTF-8, else with
// each byte that is not part of a character written \xNN and each
// backslash doubled, and Escaped set.
type TopTag struct {
	Tag     string `json:"tag"`
	Escaped bool   `json:"escaped,omitempty"` // Tag is escaped: the tag is not valid UTF-8
	Count   uint64 `json:"count"`
	Error   uint64 `json:"error"` // Count overstates the true count by at most this
}

// Repair is loss repair's counters in Gossip (docs/design.md, "Lost
// reports are repaired"): what this node asked its peers for again and
// what arrived, and what its peers asked it for.
type Repair struct {
	Requests   uint64 `json:"requests"`   // repair requests sent
	Asked      uint64 `json:"asked"`      // datagrams asked for, over every request
	Repaired   uint64 `json:"repaired"`   // datagrams that arrived after being asked for
	Resent     uint64 `json:"resent"`     // datagrams sent again for peers
	Suppressed uint64 `json:"suppressed"` // asked for on multicast just after being sent again
	Gone       uint64 `json:"gone"`       // asked for, no longer kept
	Refused    uint64 `json:"refused"`    // asked from an address no peer is heard from
}
