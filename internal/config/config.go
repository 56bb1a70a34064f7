// Package config loads and validates dthrottled's TOML configuration.
//
// One [Config] holds every setting. [Default] returns the built-in values, in
// one place; [Load] and [Parse] decode a dthrottle.toml over them, reject
// unknown keys, and call [Config.Validate], which names a bad value together
// with its allowed range. The package never logs and never exits: every
// problem comes back as an error, normally an [*Error].
package config

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Policy actions. A [Policy] with an empty Action behaves as ActionLimit.
const (
	ActionLimit = "limit" // leaky bucket with the policy's rate and burst
	ActionAllow = "allow" // always OK; no state is kept for the tag
	ActionDeny  = "deny"  // always NO; no state is kept for the tag
)

// Config is the whole configuration of dthrottled, as read from
// dthrottle.toml.
//
// The zero Config is not valid (it has no listener and no rate): start from
// [Default]. A Config is plain data, safe for concurrent reads.
//
// A reload applies every key live except those whose field has a reload
// tag, such as `reload:"restart"`: [RestartKeys] names them when they
// change.
type Config struct {
	Listen     Listen     `toml:"listen"`     // where local clients ask
	Limit      Limit      `toml:"limit"`      // the default policy for every tag
	Policy     []Policy   `toml:"policy"`     // prefix policies; the longest matching prefix wins
	Gossip     Gossip     `toml:"gossip"`     // how reports reach the other peers
	Relay      Relay      `toml:"relay"`      // relays that sum a segment's reports
	Admin      Admin      `toml:"admin"`      // the HTTP admin endpoint
	HTTP       HTTP       `toml:"http"`       // the HTTP decision endpoint
	SPOE       SPOE       `toml:"spoe"`       // the agent for HAProxy's SPOE
	RLS        RLS        `toml:"rls"`        // the rate limit service for Envoy
	Gubernator Gubernator `toml:"gubernator"` // Gubernator's API
	Log        Log        `toml:"log"`        // what the daemon logs, and how
	State      State      `toml:"state"`      // the table kept across restarts
}

// State names the file the table is saved to on a clean stop and read back
// from on start. The zero State keeps nothing across restarts.
type State struct {
	File string `toml:"file"` // the table is saved here on a clean stop and read back on start; "" disables
}

// Listen says where the query protocol is served, and its charge form.
// At least one of Unix and TCP must be set. The zero Listen serves nothing
// and is not valid.
type Listen struct {
	Unix        string `toml:"unix" reload:"restart"`        // Unix socket path; "" disables
	UnixMode    string `toml:"unix_mode" reload:"restart"`   // octal permissions of the socket, e.g. "0660"
	UnixGroup   string `toml:"unix_group" reload:"restart"`  // group to own the socket, e.g. "www-data" so Apache's children can connect; "" keeps the daemon's
	TCP         string `toml:"tcp" reload:"restart"`         // TCP "host:port", e.g. "127.0.0.1:7070"; "" disables; a non-loopback address is warned about at start
	ChargeUnix  string `toml:"charge_unix" reload:"restart"` // Unix socket path of the charge socket, where a line "<n> <tag>" charges a cost known after the response; with unix_mode and unix_group; "" disables
	ChargeTCP   string `toml:"charge_tcp" reload:"restart"`  // TCP "host:port" of the charge socket, e.g. "127.0.0.1:7073"; "" disables; a non-loopback address is warned about at start
	MaxConns    int    `toml:"max_conns" reload:"restart"`   // most client connections open at once, on the query socket and on the charge socket each
	ShareTable  bool   `toml:"share_table" reload:"restart"` // let processes that may connect to the Unix socket map the table and decide in process (docs/shared-table.md); false: they ask over the socket
	MaxTagBytes int    `toml:"max_tag_bytes"`                // longer tags are keyed by a digest
}

// Limit is the default policy, applied to every tag that no [Policy] prefix
// matches, and the cap on tracked tags. The zero Limit is not valid.
//
// The bucket is given by Rate and Burst, or by Limit per Per (a daily
// quota reads as limit = 1000 with per = "24h"), never both: [Limit.Bucket]
// says the rate and burst either way.
type Limit struct {
	Rate    float64  `toml:"rate"`     // tokens per second; 0 when limit and per give the rate
	Burst   int      `toml:"burst"`    // bucket capacity, tokens; with limit and per, 0 means limit
	Limit   int      `toml:"limit"`    // requests per per, in place of rate: the rate is limit/per and the burst, unless set, limit; 0 uses rate
	Per     Duration `toml:"per"`      // the period limit is counted over, such as "24h" (with limit)
	Quotas  string   `toml:"quotas"`   // what limits callers may state with a query (the HTTP endpoint's, an Envoy descriptor's): "any"; "lower": a rate or burst above this policy's is lowered to it; "none": refused
	MaxTags int      `toml:"max_tags"` // hard cap on tracked tags; past it, the entry closest to full is evicted first
	DryRun  bool     `toml:"dry_run"`  // serve what the limit refuses, and count it
}

// Policy gives the tags that start with Prefix their own treatment. The zero
// Policy is not valid (Prefix must be set); an empty Name means the Prefix,
// and an empty Action means [ActionLimit]. Rate and Burst matter only for
// ActionLimit. Like [Limit], a limiting Policy gives Rate and Burst, or
// Limit per Per.
type Policy struct {
	Name   string   `toml:"name"`    // label in logs and metrics; "" means the prefix
	Prefix string   `toml:"prefix"`  // tags starting with these bytes match
	Rate   float64  `toml:"rate"`    // tokens per second (action "limit"); 0 when limit and per give the rate
	Burst  int      `toml:"burst"`   // bucket capacity, tokens (action "limit"); with limit and per, 0 means limit
	Limit  int      `toml:"limit"`   // requests per per, in place of rate (action "limit")
	Per    Duration `toml:"per"`     // the period limit is counted over, such as "24h" (with limit)
	Quotas string   `toml:"quotas"`  // what limits callers may state for the policy's tags: "any", "lower" or "none", as limit.quotas; "" means "any"
	Action string   `toml:"action"`  // "limit" (a bucket), "allow" (always OK) or "deny" (always NO), the last two keeping no state; "" means "limit"
	DryRun bool     `toml:"dry_run"` // serve what the limit refuses, and count it (action "limit")
	// Partition is what the policy holds while the cluster is split:
	// "whole" (each part the whole rate), "share" (each part its nodes'
	// share of it), or "" for gossip.partition.
	Partition string `toml:"partition"`
}

// Gossip configures how hit reports are exchanged between peers. Reports go
// to the multicast Group and to each unicast peer in Peers; with neither set
// the node sends nothing. The zero Gossip is not valid (Interval is 0).
type Gossip struct {
	Interval   Duration `toml:"interval"`                      // how often hits are reported
	Group      string   `toml:"group" reload:"restart"`        // multicast "group:port", e.g. "239.255.77.77:7777"; "" disables
	Interface  string   `toml:"interface" reload:"restart"`    // interface for multicast; "" lets the kernel choose
	TTL        int      `toml:"ttl" reload:"restart"`          // multicast hop limit; 1 stays on the local network
	Peers      []string `toml:"peers" reload:"restart-on-off"` // unicast peers, "host:port"; a name is looked up again every 30 s
	Bind       string   `toml:"bind" reload:"restart"`         // "host:port" where unicast reports arrive (with peers)
	SecretFile string   `toml:"secret_file"`                   // file holding the HMAC-SHA256 key; "" sends and accepts unsigned reports
	MaxPacket  int      `toml:"max_packet"`                    // largest datagram sent, bytes
	WarmStart  bool     `toml:"warm_start" reload:"restart"`   // on start, ask the peers for their table; answering peers is always on
	MaxPeers   int      `toml:"max_peers"`                     // unicast peers learned at most; 0 learns none; learning needs secret_file
	// Partition is what every policy without its own holds while the
	// cluster is split: "whole", each connected part the whole rate (k
	// parts serve up to k times it); or "share", each part the share of
	// the rate its nodes were of the cluster before the split, back to
	// the whole as missing peers are heard again, say goodbye or are
	// forgotten (docs/design.md, The cluster bound).
	Partition string `toml:"partition"`
	// ForgetAfter is how long a silent peer counts as missing, keeping
	// its share of the rate away under "share", before it is forgotten:
	// a crashed node's share returns this long after it was last heard,
	// and a split longer than this holds the whole rate again.
	ForgetAfter Duration `toml:"forget_after"`
}

// The partition policies (Policy.Partition, Gossip.Partition).
const (
	// PartitionWhole: each connected part of a split cluster holds the
	// whole rate, so k parts serve up to k times it.
	PartitionWhole = "whole"
	// PartitionShare: each part holds the share of the rate its nodes
	// were of the cluster before the split, and the whole rate again as
	// the missing nodes return, say goodbye or are forgotten.
	PartitionShare = "share"
)

// Shares reports whether any policy, the default included, holds a share
// of the rate in a split.
func (c *Config) Shares() bool {
	if c.Gossip.Partition == PartitionShare {
		return true
	}
	for _, p := range c.Policy {
		if p.Partition == PartitionShare {
			return true
		}
	}
	return false
}

// PolicyShares reports whether the policy p (nil for [limit]) holds a
// share of the rate in a split.
func (c *Config) PolicyShares(p *Policy) bool {
	if p != nil && p.Partition != "" {
		return p.Partition == PartitionShare
	}
	return c.Gossip.Partition == PartitionShare
}

// Admin configures the HTTP admin endpoint (/metrics, /healthz, /v1/...).
// The zero Admin disables it.
type Admin struct {
	HTTP  string `toml:"http" reload:"restart"`  // "host:port" of /metrics, /healthz and /v1/..., e.g. "127.0.0.1:7071"; "" disables
	Pprof bool   `toml:"pprof" reload:"restart"` // also serve Go's profiler at /debug/pprof/
}

// HTTP configures the HTTP decision endpoint (GET /v1/allow?tag=), a
// listener of its own for proxies' subrequests, never the admin endpoint.
// The zero HTTP is not valid (MaxConns is 0): start from [Default].
type HTTP struct {
	Listen       string `toml:"listen" reload:"restart"`    // "host:port" or "unix:/path", e.g. "127.0.0.1:7072"; "" disables
	MaxConns     int    `toml:"max_conns" reload:"restart"` // most connections open at once; more are answered 503 and closed
	RefuseStatus int    `toml:"refuse_status"`              // the status of a refusal: 403 or 429
}

// HTTPUnixPrefix marks an HTTP.Listen that is a Unix socket path.
const HTTPUnixPrefix = "unix:"

// Log says how the daemon logs: to stderr, where journald adds the
// timestamps. The zero Log is not valid: start from [Default].
type Log struct {
	Format string `toml:"format" reload:"restart"` // "text" (key=value) or "json", to stderr
	Level  string `toml:"level"`                   // the least severe level logged; never a line per query
}

// SlogLevel is Level as slog's; a level Validate would reject is Info.
func (l Log) SlogLevel() slog.Level {
	switch l.Level {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// Duration is a time.Duration written in TOML as a string that
// time.ParseDuration accepts, such as "1s" or "250ms". The zero Duration is
// zero seconds.
type Duration struct {
	time.Duration
}

// UnmarshalText parses a duration such as "1s" or "250ms".
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := time.ParseDuration(string(text))
	if err != nil {
		return fmt.Errorf("invalid duration %q: want a number with a unit, such as \"1s\" or \"250ms\"", text)
	}
	d.Duration = v
	return nil
}

// MarshalText writes the duration in the form UnmarshalText reads.
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(d.Duration.String()), nil
}

// Default returns the built-in configuration, used for every key a file does
// not set. It needs no privileges and sends nothing off the host: the socket
// lives in the user's runtime directory, and TCP, gossip and the admin
// endpoint are off. Its only input is [DefaultUnixPath].
func Default() Config {
	return Config{
		Listen: Listen{
			Unix:        DefaultUnixPath(), // per-user path, writable without root
			UnixMode:    "0660",            // owner and group may connect
			UnixGroup:   "",                // keep the daemon's own group
			TCP:         "",                // no TCP listener
			ChargeUnix:  "",                // no charge socket
			ChargeTCP:   "",                // no charge socket over TCP
			MaxConns:    10000,             // connections open at once
			MaxTagBytes: 256,               // longer tags are keyed by a digest
			ShareTable:  true,              // processes on the Unix socket may decide in process
		},
		Limit: Limit{
			Rate:    1.0,        // one request per second per tag, long run
			Burst:   10,         // ten at once after a quiet spell
			Limit:   0,          // the rate is given as rate, not as limit per period
			Per:     Duration{}, // (with limit only)
			Quotas:  QuotasAny,  // callers may state any limit for a query
			MaxTags: 1000000,    // a million tracked tags
		},
		Policy: nil, // every tag gets Limit
		Gossip: Gossip{
			Interval:   Duration{time.Second}, // report hits every second
			Group:      "",                    // no multicast: nothing leaves the host
			Interface:  "",                    // kernel's choice, if a group is set
			TTL:        1,                     // multicast stays on the local network
			Peers:      nil,                   // no unicast peers
			Bind:       ":7777",               // unicast reports arrive here, if peers are set
			SecretFile: "",                    // unsigned reports
			MaxPacket:  1400,                  // fits a 1500-byte Ethernet MTU with room for IP, UDP and tunnel headers
			WarmStart:  true,                  // ask the peers for their table on start
			MaxPeers:   1000,                  // learn up to a thousand peers (with a secret)
			Partition:  PartitionWhole,        // each part of a split cluster holds the whole rate
			// A silent peer's share is kept away a minute: long enough for
			// most splits to heal, short enough for a crashed node's share
			// to come back soon.
			ForgetAfter: Duration{time.Minute},
		},
		Relay: Relay{
			Mode:  RelayOff, // every node reports to every peer
			Hold:  0.5,      // a relay holds a tag until half its burst
			Peers: nil,      // no other segment
			Bind:  ":7778",  // other segments' relays reach a relay here
		},
		Admin: Admin{
			HTTP: "", // no admin endpoint
		},
		HTTP: HTTP{
			Listen:       "",   // no HTTP decision endpoint
			MaxConns:     1024, // proxies keep a few keep-alive connections each
			RefuseStatus: 403,  // what nginx's auth_request accepts as a refusal
		},
		SPOE: SPOE{
			Listen:   "",   // no SPOE agent
			MaxConns: 1024, // HAProxy opens a few per thread
		},
		RLS: RLS{
			Listen:      "",                 // no rate limit service
			MaxConns:    1024,               // Envoy opens one or a few per worker thread
			MaxRequests: 1024,               // a loaded Envoy has a few in flight; each held costs some 4 KiB
			Unmatched:   UnmatchedLimit,     // under [limit], as every tag
			ChargeKey:   "dthrottle_charge", // the entry key that makes a descriptor a charge
		},
		Gubernator: Gubernator{
			GRPC:        "",   // no gRPC service
			HTTP:        "",   // no HTTP gateway
			MaxConns:    1024, // clients keep a connection or a few each
			MaxRequests: 1024, // each held costs its message, at most 1 MiB
		},
		Log: Log{
			Format: "text", // key=value lines
			Level:  "info", // starts, stops, peers, warnings; never a line per query
		},
		State: State{
			File: "", // nothing kept across restarts
		},
	}
}

// DefaultUnixPath returns the socket path used when the configuration sets
// none: "$XDG_RUNTIME_DIR/dthrottle.sock" when XDG_RUNTIME_DIR names an
// existing directory by an absolute path, otherwise
// "<os.TempDir()>/dthrottle-<uid>.sock".
func DefaultUnixPath() string {
	if dir := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(dir) {
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			if p := filepath.Join(dir, "dthrottle.sock"); len(p) <= maxUnixPath {
				return p
			}
		}
	}
	return filepath.Join(os.TempDir(), "dthrottle-"+strconv.Itoa(os.Getuid())+".sock")
}

// UnixModeBits returns Listen.UnixMode as file permission bits. It is
// meaningful once [Config.Validate] has accepted the Config; for a mode that
// does not parse it returns 0.
func (c *Config) UnixModeBits() os.FileMode {
	m, ok := parseMode(c.Listen.UnixMode)
	if !ok {
		return 0
	}
	return m
}
