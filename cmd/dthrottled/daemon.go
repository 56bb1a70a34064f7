package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/dthrottle/dthrottle/admin"
	"github.com/dthrottle/dthrottle/bucket"
	"github.com/dthrottle/dthrottle/config"
	"github.com/dthrottle/dthrottle/protocol"
)

// daemon is a running dthrottled: the table, the line server and its
// listeners, and the gossip with the peers.
type daemon struct {
	log       *slog.Logger
	level     *slog.LevelVar
	path      string // config file; "" for the built-in defaults
	started   time.Time
	table     *bucket.Table
	server    *protocol.Server
	gossip    *gossipRun    // nil when no group and no peers are configured
	admin     *admin.Server // nil unless admin.http is set
	listeners []net.Listener
	unlock    func() // releases the Unix socket's lock file
	failed    chan error

	mu                      sync.Mutex // guards cfg and the reload counts
	cfg                     config.Config
	reloads, reloadFailures uint64
}

// decider lets the line server ask the table.
type decider struct{ t *bucket.Table }

func (d decider) Decide(now time.Time, tag []byte) bool { return d.t.Allow(now, tag) }

// DecideBatch lets the line server hand the table a whole pipelined batch,
// which it decides with the next queries' memory already on its way.
func (d decider) DecideBatch(now time.Time, tags [][]byte, ok []bool) { d.t.AllowBatch(now, tags, ok) }

// tableConfig turns the file's limits into the table's.
func tableConfig(cfg config.Config) bucket.Config {
	tc := bucket.Config{
		Default:     bucket.Policy{Name: "default", Rate: cfg.Limit.Rate, Burst: cfg.Limit.Burst},
		MaxTags:     cfg.Limit.MaxTags,
		MaxTagBytes: cfg.Listen.MaxTagBytes,
	}
	for _, p := range cfg.Policy {
		bp := bucket.Policy{Name: p.Name, Prefix: p.Prefix, Rate: p.Rate, Burst: p.Burst}
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

// start opens the listeners, or takes the ones systemd passed, and serves
// on them. On error, nothing is left open.
func start(cfg config.Config, path string, log *slog.Logger, level *slog.LevelVar) (_ *daemon, err error) {
	table, err := bucket.New(tableConfig(cfg))
	if err != nil {
		return nil, err
	}
	d := &daemon{log: log, level: level, path: path, started: time.Now(), table: table, cfg: cfg,
		unlock: func() {}, failed: make(chan error, 4)}
	defer func() {
		if err != nil {
			d.closeListeners()
		}
	}()
	inherited, err := activationListeners()
	if err != nil {
		return nil, err
	}
	if len(inherited) > 0 {
		for _, l := range inherited {
			d.listeners = append(d.listeners, l.Listener)
			log.Info("listening on a socket passed by systemd", "name", l.name, l.Addr().Network(), l.Addr().String())
		}
		log.Info("socket activation: listen.unix and listen.tcp are not used")
	} else if err := d.listen(cfg); err != nil {
		return nil, err
	}
	if d.gossip, err = startGossip(cfg.Gossip, table, log); err != nil {
		return nil, err
	}
	warnFewFiles(cfg.Listen.MaxConns, log)
	d.server = protocol.NewServer(decider{table}, protocol.Config{MaxConns: cfg.Listen.MaxConns, Logger: log})
	if err := d.startAdmin(cfg.Admin); err != nil {
		if d.gossip != nil {
			d.gossip.node.Stop(context.Background())
		}
		return nil, err
	}
	for _, l := range d.listeners {
		go func(l net.Listener) {
			if err := d.server.Serve(l); err != nil {
				d.failed <- fmt.Errorf("serving %s: %w", l.Addr(), err)
			}
		}(l)
	}
	log.Info("started", "version", versionString(), "config", describe(path), "rate", cfg.Limit.Rate,
		"burst", cfg.Limit.Burst, "policies", len(cfg.Policy), "max_tags", cfg.Limit.MaxTags)
	return d, nil
}

// listen opens the configured Unix and TCP listeners.
func (d *daemon) listen(c config.Config) error {
	cfg, mode := c.Listen, c.UnixModeBits()
	if cfg.Unix != "" {
		l, unlock, err := listenUnix(cfg.Unix, mode, cfg.UnixGroup)
		if err != nil {
			return err
		}
		d.listeners, d.unlock = append(d.listeners, l), unlock
		d.log.Info("listening", "unix", cfg.Unix, "mode", fmt.Sprintf("%#o", mode), "group", cfg.UnixGroup)
	}
	if cfg.TCP != "" {
		l, err := net.Listen("tcp", cfg.TCP)
		if err != nil {
			return fmt.Errorf("listening on tcp %s: %w", cfg.TCP, err)
		}
		d.listeners = append(d.listeners, l)
		d.log.Info("listening", "tcp", l.Addr().String())
		if !isLoopback(l.Addr()) {
			d.log.Warn("tcp listener is reachable from other hosts: anyone who can connect can spend tags", "tcp", l.Addr().String())
		}
	}
	return nil
}

// stop stops accepting and lets every connection answer what it has read,
// for up to grace; a client that does not read its replies is then cut
// off, which is logged but not an error. Then it reports the hits not yet
// reported, so a clean stop loses no served hit.
func (d *daemon) stop(grace time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := d.server.Shutdown(ctx); err != nil {
		d.log.Warn("stop: connections not reading their replies were cut off", "grace", grace,
			"connections", d.server.Stats().Active, "err", err)
	}
	var err error
	if d.gossip != nil {
		gctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		err = d.gossip.node.Stop(gctx)
	}
	d.closeListeners()
	if d.admin != nil {
		d.admin.Close()
	}
	return err
}

// closeListeners closes the listeners (a Unix listener this process
// created removes its socket file) and then releases the socket's lock.
// Safe to call twice.
func (d *daemon) closeListeners() {
	for _, l := range d.listeners {
		l.Close()
	}
	d.unlock()
	d.unlock = func() {}
}

// healthy reports whether the table answers: every shard's lock can be
// taken. The watchdog is fed only while it does.
func (d *daemon) healthy() bool {
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

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
