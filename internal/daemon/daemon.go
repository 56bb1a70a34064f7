// Package daemon is a running dthrottled: the tag table, the ways in (the
// line protocol, the HTTP decision endpoint, the SPOE agent: see ways.go)
// and their listeners, the gossip with the peers and the admin endpoint,
// wired together. It owns start, reload and stop; cmd/dthrottled only
// parses flags, loads the config, handles signals and talks to systemd.
//
// Everything a daemon reaches outside itself is injected through
// [Options]: listeners, clock, logger, notifier, gossip transports. So the
// whole daemon runs in a test's process, and tests wait on its [Event]s
// rather than on its log.
package daemon

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/dthrottle/dthrottle/internal/admin"
	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	"github.com/dthrottle/dthrottle/internal/top"
)

// Options is what New needs besides the config. Only Config is required;
// every other field has a working zero value.
type Options struct {
	// Config is the validated configuration to run.
	Config config.Config
	// Path is the config file Reload rereads; "" means the built-in
	// defaults, which cannot be reloaded.
	Path string
	// Listeners, when set, serve the query protocol instead of the
	// listen.unix and listen.tcp of Config (systemd's socket activation
	// passes them). The daemon closes them when it stops.
	Listeners []NamedListener
	// Logger receives the daemon's log; nil discards.
	Logger *slog.Logger
	// Level, when set, follows log.level across reloads.
	Level *slog.LevelVar
	// Clock gives the time every decision is taken at, by every way in;
	// nil is time.Now.
	Clock func() time.Time
	// Notifier is told when the daemon is ready, reloading and stopping;
	// nil tells no one.
	Notifier Notifier
	// WatchdogEvery is how often Run feeds Notifier.Watchdog while the table
	// answers; 0 never.
	WatchdogEvery time.Duration
	// Transports, when set, opens the gossip transports instead of UDP
	// sockets: tests gossip over an in-memory network. It is called only
	// when gossip is configured (a group or peers).
	Transports func(config.Gossip) (transport.Transport, error)
	// RelayLink, when set with Transports, opens a relay's link to the
	// relays of other segments (relay.mode = "serve") instead of a UDP
	// socket; with Transports but not RelayLink a relay has no link.
	RelayLink func(config.Relay) (transport.Transport, error)
	// OnEvent, when set, is called with every Event, synchronously, from
	// whichever goroutine caused it: it must not block or call back into the
	// daemon.
	OnEvent func(Event)
	// Version is reported in the log and by the admin endpoint.
	Version string
}

// NamedListener is a listener with the name it is known by in the log
// (a systemd FileDescriptorName, say).
type NamedListener struct {
	net.Listener
	Name string
}

// Notifier is told of the daemon's life, as systemd's sd_notify is. Its
// methods are called from the goroutines of Run and Reload.
type Notifier interface {
	Ready()     // serving, after a start or a reload
	Reloading() // a reload began
	Stopping()  // a stop began
	Watchdog()  // the table answers
}

// Daemon is a running dthrottled. Create it with New, serve with Run, stop
// with Close. Reload, Snapshot and Healthy are safe for concurrent use with
// each other and with Run.
type Daemon struct {
	log      *slog.Logger
	level    *slog.LevelVar
	path     string
	started  time.Time
	now      func() time.Time
	notify   Notifier
	watchdog time.Duration
	onEvent  func(Event)
	version  string
	// relayLink is Options.RelayLink.
	relayLink func(config.Relay) (transport.Transport, error)

	table  *bucket.Table
	shares shareState      // the policies the table holds, at this node's share, share.go
	beat   *beating        // the shared table's heartbeat, shared.go; nil when not shared
	top    *top.Feed       // who is throttled, top.go
	ways   []*way          // the ways in the config turns on, in the order of ways
	passed []NamedListener // Options.Listeners, for the line protocol
	gossip *gossipRun      // nil when no group and no peers are configured
	admin  *admin.Server   // nil unless admin.http is set
	failed chan error

	stateMu sync.Mutex // guards state
	state   StateStats

	mu                      sync.Mutex // guards cfg, the reload counts and closed
	cfg                     config.Config
	reloads, reloadFailures uint64
	closed                  bool
	closeErr                error
}

// New builds a daemon from a validated config: the table, the ways in and
// their listeners (the line protocol's unless given), the gossip node and
// the admin endpoint. It serves nothing
// until Run. On error, nothing is left open.
func New(opts Options) (_ *Daemon, err error) {
	cfg := opts.Config
	d := &Daemon{
		log: opts.Logger, level: opts.Level, path: opts.Path, now: opts.Clock,
		notify: opts.Notifier, watchdog: opts.WatchdogEvery, onEvent: opts.OnEvent,
		version: opts.Version, cfg: cfg, passed: opts.Listeners, failed: make(chan error, 4),
		relayLink: opts.RelayLink,
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if d.now == nil {
		d.now = time.Now
	}
	if d.notify == nil {
		d.notify = silent{}
	}
	if d.onEvent == nil {
		d.onEvent = func(Event) {}
	}
	d.started = d.now()
	if err := cfg.CheckPaths(ConfigFile(opts.Path)...); err != nil {
		return nil, err
	}
	if d.table, err = bucket.New(tableConfig(cfg)); err != nil {
		return nil, err
	}
	d.shares.cfg = cfg
	d.loadState(cfg)
	var every time.Duration // the peers' report interval, when there are peers
	if cfg.Gossip.Group != "" || len(cfg.Gossip.Peers) > 0 {
		every = cfg.Gossip.Interval.Duration
	}
	if d.top, err = newTop(d.table, every, d.now); err != nil {
		return nil, err
	}
	if err := d.openWays(cfg); err != nil {
		return nil, err
	}
	if d.gossip, err = d.startGossip(cfg, opts.Transports); err != nil {
		d.abandonWays()
		return nil, err
	}
	if err := d.startAdmin(cfg.Admin); err != nil {
		d.abandonWays()
		if d.gossip != nil {
			d.gossip.node.Stop(context.Background())
		}
		return nil, err
	}
	return d, nil
}

// Run serves until ctx is done or a listener fails, feeding the watchdog
// meanwhile. It returns nil when ctx ended it and the listener's error
// otherwise; either way, Close stops the daemon.
func (d *Daemon) Run(ctx context.Context) error {
	d.serveWays()
	cfg := d.Config()
	if d.gossip != nil {
		d.gossip.node.Start()
		if cfg.Gossip.WarmStart {
			d.gossip.node.Warm(d.now())
		}
	} else {
		d.top.Start()
	}
	rate, burst := cfg.Limit.Bucket()
	d.log.Info("started", "version", d.version, "config", describe(d.path), "rate", rate,
		"burst", burst, "policies", len(cfg.Policy), "max_tags", cfg.Limit.MaxTags)
	d.event(Event{Kind: Started})
	d.notify.Ready()
	var watchdog <-chan time.Time
	if d.watchdog > 0 {
		t := time.NewTicker(d.watchdog)
		defer t.Stop()
		watchdog = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-watchdog:
			if d.Healthy() {
				d.notify.Watchdog()
			} else {
				d.log.Error("table not answering: not feeding the watchdog")
			}
		case err := <-d.failed:
			d.log.Error("listener failed", "err", err)
			d.event(Event{Kind: Failed, Err: err})
			return err
		}
	}
}

// Close stops accepting on every way in and lets every connection answer
// what it has read, for up to grace; a client that does not read its
// replies is then cut off, which is logged but not an error. Then it
// reports the hits not yet reported, so a clean stop loses no served hit,
// and closes the listeners and the admin endpoint, in that order. Safe to
// call twice: the second call returns the first one's result.
func (d *Daemon) Close(grace time.Duration) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return d.closeErr
	}
	d.closed = true
	d.notify.Stopping()
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	d.stopWays(ctx, grace)
	d.stopBeat()
	d.top.Stop()
	d.event(Event{Kind: Stopped, Stage: StageQueries})
	if d.cfg.State.File != "" {
		d.saveState(d.cfg)
		d.event(Event{Kind: Stopped, Stage: StageState})
	}
	if d.gossip != nil {
		gctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		d.closeErr = d.gossip.node.Stop(gctx)
		d.event(Event{Kind: Stopped, Stage: StageGossip, Err: d.closeErr})
	}
	d.closeWays()
	d.event(Event{Kind: Stopped, Stage: StageListeners})
	if d.admin != nil {
		d.admin.Close()
		d.event(Event{Kind: Stopped, Stage: StageAdmin})
	}
	d.log.Info("stopped")
	return d.closeErr
}

// Healthy reports whether the table answers: every shard's lock can be
// taken within a second. The watchdog is fed only while it does.
func (d *Daemon) Healthy() bool {
	done := make(chan struct{})
	go func() {
		d.table.Stats()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(time.Second):
		return false
	}
}

// Config is the configuration running now.
func (d *Daemon) Config() config.Config {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg
}

// AdminAddr is the admin endpoint's address, nil when it is off.
func (d *Daemon) AdminAddr() net.Addr {
	if d.admin == nil {
		return nil
	}
	return d.admin.Addr()
}

// silent is the Notifier that tells no one.
type silent struct{}

func (silent) Ready()     {}
func (silent) Reloading() {}
func (silent) Stopping()  {}
func (silent) Watchdog()  {}

// tableConfig turns the file's limits into the table's.
func tableConfig(cfg config.Config) bucket.Config {
	rate, burst := cfg.Limit.Bucket()
	tc := bucket.Config{
		Default:     bucket.Policy{Name: "default", Rate: rate, Burst: burst, DryRun: cfg.Limit.DryRun, Quotas: quotaRule(cfg.Limit.Quotas)},
		MaxTags:     cfg.Limit.MaxTags,
		MaxTagBytes: cfg.Listen.MaxTagBytes,
		Shared:      cfg.Listen.ShareTable,
	}
	for _, p := range cfg.Policy {
		rate, burst := p.Bucket()
		bp := bucket.Policy{Name: p.Name, Prefix: p.Prefix, Rate: rate, Burst: burst, DryRun: p.DryRun, Quotas: quotaRule(p.Quotas)}
		switch p.Action {
		case config.ActionAllow:
			bp.Action = bucket.Allow
		case config.ActionDeny:
			bp.Action = bucket.Deny
		}
		tc.Policies = append(tc.Policies, bp)
	}
	return tc
}

// quotaRule is the table's name for a policy's quotas key: what limits
// callers may state for its tags ("" is "any").
func quotaRule(s string) bucket.QuotaRule {
	switch s {
	case config.QuotasLower:
		return bucket.QuotaLower
	case config.QuotasNone:
		return bucket.QuotaNone
	}
	return bucket.QuotaAny
}

// warnFewFiles warns when the open-file limit cannot hold max_conns
// connections besides the daemon's own descriptors: past it, accepting
// backs off until connections close (LimitNOFILE in the unit).
func warnFewFiles(maxConns int, log *slog.Logger) {
	const own = 32 // listeners, gossip sockets, admin, logs, lock file
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur < uint64(maxConns)+own {
		log.Warn("open-file limit below listen.max_conns: connections past it wait until others close",
			"limit", rl.Cur, "max_conns", maxConns, "want", uint64(maxConns)+own)
	}
}

func describe(path string) string {
	if path == "" {
		return "built-in defaults"
	}
	return path
}

// ConfigFile lists the config file at path, when there is one, for
// [config.Config.CheckPaths]: no key may name it.
func ConfigFile(path string) []config.NamedPath {
	if path == "" {
		return nil
	}
	return []config.NamedPath{{Name: "the config file", Path: path}}
}
