package admin

import (
	"log/slog"
	"time"

	"github.com/dthrottle/dthrottle/api"
	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/gossip"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/state"
	"github.com/dthrottle/dthrottle/internal/ways/httpapi"
	"github.com/dthrottle/dthrottle/internal/ways/protocol"
	"github.com/dthrottle/dthrottle/internal/ways/spoe"
	"github.com/prometheus/client_golang/prometheus"
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

// Sources are the functions a Server reads the daemon through. They
// are called from request goroutines, concurrently with each other and with
// themselves, so they must be safe for concurrent use. The zero Sources is
// not usable: Snapshot, Tag and Forget are required.
type Sources struct {
	// Snapshot returns the daemon's counters. It is called once per
	// request to /metrics, /v1/stats, /healthz, /v1/top and the status
	// page, and every 5 s for the status page's charts.
	Snapshot func() Snapshot
	// Peers returns the gossip peers table. Nil (or a nil result) when
	// gossip is off: /v1/peers then serves an empty array.
	Peers func() []gossip.PeerInfo
	// Tag returns the state of one tag, given as a client sends it (the
	// adapter maps it to the table's key). An untracked tag is a full bucket
	// of its policy: Tracked false and Tokens equal to Burst.
	Tag func(tag string) TagView
	// Forget drops one tag and its unreported hits, and reports whether it
	// was tracked. Peers are not told.
	Forget func(tag string) bool
	// Top returns, per policy, the n tags with the most queries refused
	// (by "refused") or served (by "served") over the recent window, as
	// this node (scope "node") or the whole cluster (scope "cluster")
	// counts them; only the policy named, or every policy when policy is
	// "". The server has checked the arguments, and holds the answer to
	// them (n tags at most, the policy asked). Nil: /v1/top answers a
	// document with no policies, and the status page says the view is not
	// available.
	Top func(by, scope, policy string, n int) api.Top
	// Collectors are the metric families /metrics serves besides the
	// gossip node's (read from Snapshot) and the Go runtime's and the
	// process's: each component's own, such as the table's
	// (tablemetric.NewCollector) or a way in's, registered as given on the
	// server's own registry. Two collectors describing the same family
	// make New fail. A collector is called from request goroutines, so it
	// must be safe for concurrent use.
	Collectors []prometheus.Collector
}

// Snapshot is the daemon's counters at an instant, in the types of the
// packages that count them: this package builds the JSON documents from
// them, and the gossip node's metrics (the other metrics are the
// components' own, in Sources.Collectors). Counters count over the
// process's life; the zero Snapshot is valid and reads as a daemon that
// has done nothing, with gossip, the HTTP endpoint and the state file
// off. Snapshot and the values it holds are plain values, safe to copy
// and to read from several goroutines; the pointers are never written
// through.
type Snapshot struct {
	Version string         // the daemon's version
	Started time.Time      // when the process started
	Table   bucket.Stats   // tags tracked, evictions
	Server  protocol.Stats // the query socket's connections and requests
	// Policies are the current policies, the default first, with the
	// queries each answered. A query with an empty tag is answered OK
	// without a policy, so the sums over Policies may fall short of
	// Server.Queries.
	Policies       []bucket.PolicyStats
	Gossip         *Gossip        // nil when gossip is off
	HTTP           *httpapi.Stats // the HTTP decision endpoint; nil when off
	SPOE           *spoe.Stats    // the SPOE agent; nil when off
	State          *state.Stats   // the state file; nil when off
	Reloads        uint64         // configuration reloads applied
	ReloadFailures uint64         // reloads rejected (the running config kept)
}

// Gossip is the gossip node's counters and who it is.
type Gossip struct {
	Node  uint64 // this node's id, shown as 16 hex digits
	Peers int    // peers heard and not silent
	// Members is who this node counts in its cluster, and its share.
	Members gossip.Members
	gossip.Stats
	Discovery transport.DiscoveryStats // unicast peers learned; zero without unicast peers
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
