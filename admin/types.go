package admin

import (
	"log/slog"
	"time"
)

// Config configures a Server. The zero Config is not usable: Addr is
// required.
type Config struct {
	// Addr is the TCP "host:port" to listen on, such as "127.0.0.1:7071".
	// The server listens there and nowhere else; a host that is not a
	// loopback address (or empty, meaning every address) is warned about at
	// start, since it makes tag data reachable from other hosts.
	Addr string
	// Logger receives the start warning and the HTTP server's own errors,
	// never a line per request; nil discards.
	Logger *slog.Logger
	// Pprof also serves Go's runtime profiles (net/http/pprof) under
	// /debug/pprof/, for profiling the daemon under load. Off by default:
	// a CPU profile costs the daemon while it runs.
	Pprof bool
}

// Sources are the functions a Server reads the daemon through, so that this
// package knows nothing of the tag table, the query server or gossip. They
// are called from request goroutines, concurrently with each other and with
// themselves, so they must be safe for concurrent use. The zero Sources is
// not usable: Snapshot, Tag and Forget are required.
type Sources struct {
	// Snapshot returns the daemon's counters. It is called once per
	// request to /metrics, /v1/stats and /healthz.
	Snapshot func() Snapshot
	// Peers returns the gossip peers table. Nil (or a nil result) when
	// gossip is off: /v1/peers then serves an empty array.
	Peers func() []Peer
	// Tag returns the state of one tag, given as a client sends it (the
	// adapter maps it to the table's key). An untracked tag is a full bucket
	// of its policy: Tracked false and Tokens equal to Burst.
	Tag func(tag string) TagView
	// Forget drops one tag and its unreported hits, and reports whether it
	// was tracked. Peers are not told.
	Forget func(tag string) bool
}

// Snapshot is the daemon's counters at an instant. Counters (uint64) count
// over the process's life; the zero Snapshot is valid and reads as a daemon
// that has done nothing, with gossip off. Snapshot and the types it holds
// are plain values, safe to copy and to read from several goroutines.
type Snapshot struct {
	Version     string    // the daemon's version, for dthrottle_build_info
	Started     time.Time // when the process started
	Tags        int       // tags tracked now
	Evictions   uint64    // tags evicted by the max_tags cap
	EvictedHits uint64    // unreported hits lost with evicted tags
	Connections Connections
	Queries     Queries
	// Policies are the current policies, the default first, with the
	// queries each answered. A query with an empty tag is answered OK
	// without a policy, so the sums over Policies may fall short of
	// Queries.Total.
	Policies       []PolicyCounts
	Gossip         Gossip
	HTTP           HTTP   // the HTTP decision endpoint
	Reloads        uint64 // configuration reloads applied
	ReloadFailures uint64 // reloads rejected (the running config kept)
}

// Connections counts the query server's connections. The zero value
// counts none.
type Connections struct {
	Active   uint64 // being served now
	Accepted uint64 // taken into service
	Rejected uint64 // closed on arrival because max_conns were being served
}

// Queries counts the query server's requests. The zero value counts
// none.
type Queries struct {
	Total       uint64 // requests answered, empty tags included
	LineTooLong uint64 // connections closed for a line over the hard cap
}

// PolicyCounts is one policy and the queries it answered. The zero value
// is an unnamed policy that answered nothing.
type PolicyCounts struct {
	Name   string // as configured; "default" for the [limit] policy
	Action string // "limit", "allow" or "deny"
	OK, NO uint64 // queries answered OK and NO under this policy
	DryRun bool   // the policy serves what its limit refuses
	// DryRunRefused counts, of OK, the queries the limit would have
	// refused.
	DryRunRefused uint64
}

// HTTP is the HTTP decision endpoint's counters. All but Enabled are
// ignored when Enabled is false, so the zero value is the endpoint off.
type HTTP struct {
	Enabled  bool
	Allowed  uint64 // requests answered 2xx, dry runs included
	Refused  uint64 // requests answered the refusal status
	Bad      uint64 // requests answered 4xx for their form
	Active   uint64 // connections open now
	Accepted uint64 // connections taken into service
	Rejected uint64 // connections answered 503 because max_conns were open
}

// Gossip is the gossip node's counters. All but Enabled are ignored when
// Enabled is false, so the zero value is gossip off.
type Gossip struct {
	Enabled         bool
	Node            uint64 // this node's id, shown as 16 hex digits
	PacketsSent     uint64
	BytesSent       uint64
	PacketsReceived uint64 // datagrams accepted
	BytesReceived   uint64 // bytes of datagrams accepted
	Dropped         Dropped
	Own             uint64 // this node's own datagrams heard back, ignored
	Lost            uint64 // datagrams missing from peers' sequence numbers
	// FingerprintMismatch counts datagrams from peers whose policies differ.
	FingerprintMismatch uint64
	Peers               int           // peers heard and not silent
	LastReport          time.Time     // when the last report was sent; zero before the first
	LastReportDuration  time.Duration // how long the last report took to send
}

// Dropped counts received datagrams dropped, by reason. The zero value
// counts none.
type Dropped struct {
	Auth      uint64 // no valid MAC while a secret is configured
	Malformed uint64
	Version   uint64 // another format version
	Duplicate uint64 // seen before, or too old to tell
	Stale     uint64 // sent before this process started, or too long ago
}

// Peer is what the gossip node knows of one peer. It is a plain value,
// safe to copy; the zero Peer is node 0, never heard.
type Peer struct {
	Node             uint64 // the peer's node id, shown as 16 hex digits
	Addr             string // where its last datagram came from
	FirstHeard       time.Time
	LastHeard        time.Time
	Packets          uint64 // datagrams accepted from it
	Hits             uint64 // hits applied from it
	Lost             uint64 // datagrams missing from its sequence
	Duplicates       uint64 // datagrams seen twice, or too old to tell
	FingerprintMatch bool   // its policies are the same as ours
	Silent           bool   // not heard for the silence timeout
}

// TagView is the state of one tag at an instant. The zero TagView is an
// untracked tag under an unnamed policy with a burst of 0.
type TagView struct {
	// Key is the table's key for the tag: the tag itself, or for a tag over
	// max_tag_bytes, its digest form (which need not be valid UTF-8).
	Key        string
	Tracked    bool    // false: the table holds nothing for the tag
	Policy     string  // the name of the policy the tag falls under
	Action     string  // that policy's action: "limit", "allow" or "deny"
	Rate       float64 // that policy's rate, tokens per second
	Burst      int     // that policy's burst, tokens
	Tokens     float64 // tokens in the bucket; negative is debt from peers' hits
	Unreported uint64  // hits served here and not yet reported to peers
	DryRun     bool    // that policy serves what its limit refuses
	// DryRunRefused counts, over the whole policy, the queries its limit
	// would have refused.
	DryRunRefused uint64
}
