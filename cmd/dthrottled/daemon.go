package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/dthrottle/dthrottle/bucket"
	"github.com/dthrottle/dthrottle/config"
	"github.com/dthrottle/dthrottle/gossip"
	"github.com/dthrottle/dthrottle/protocol"
)

// daemon is a running dthrottled: the table, the line server and its
// listeners.
type daemon struct {
	log       *slog.Logger
	table     *bucket.Table
	server    *protocol.Server
	gossip    *gossip.Node // nil when no group and no peers are configured
	listeners []net.Listener
	unlock    func() // releases the Unix socket's lock file
	failed    chan error
}

// decider lets the line server ask the table.
type decider struct{ t *bucket.Table }

func (d decider) Decide(now time.Time, tag []byte) bool { return d.t.Allow(now, tag) }

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

// start opens the listeners and serves on them. On error, nothing is left
// open.
func start(cfg config.Config, log *slog.Logger) (_ *daemon, err error) {
	table, err := bucket.New(tableConfig(cfg))
	if err != nil {
		return nil, err
	}
	d := &daemon{log: log, table: table, unlock: func() {}, failed: make(chan error, 2)}
	defer func() {
		if err != nil {
			d.closeListeners()
		}
	}()
	if cfg.Listen.Unix != "" {
		l, unlock, err := listenUnix(cfg.Listen.Unix, cfg.UnixModeBits(), cfg.Listen.UnixGroup)
		if err != nil {
			return nil, err
		}
		d.listeners, d.unlock = append(d.listeners, l), unlock
		log.Info("listening", "unix", cfg.Listen.Unix, "mode", fmt.Sprintf("%#o", cfg.UnixModeBits()))
	}
	if cfg.Listen.TCP != "" {
		l, err := net.Listen("tcp", cfg.Listen.TCP)
		if err != nil {
			return nil, fmt.Errorf("listening on tcp %s: %w", cfg.Listen.TCP, err)
		}
		d.listeners = append(d.listeners, l)
		log.Info("listening", "tcp", l.Addr().String())
		if !isLoopback(l.Addr()) {
			log.Warn("tcp listener is reachable from other hosts: anyone who can connect can spend tags", "tcp", l.Addr().String())
		}
	}
	if d.gossip, err = startGossip(cfg.Gossip, table, log); err != nil {
		return nil, err
	}
	d.server = protocol.NewServer(decider{table}, protocol.Config{MaxConns: cfg.Listen.MaxConns, Logger: log})
	for _, l := range d.listeners {
		go func(l net.Listener) {
			if err := d.server.Serve(l); err != nil {
				d.failed <- fmt.Errorf("serving %s: %w", l.Addr(), err)
			}
		}(l)
	}
	log.Info("started", "version", versionString(), "rate", cfg.Limit.Rate, "burst", cfg.Limit.Burst,
		"policies", len(cfg.Policy), "max_tags", cfg.Limit.MaxTags)
	return d, nil
}

// stop stops accepting, lets every connection answer what it has read and
// waits for them, up to ctx; then it reports the hits not yet reported, so
// a clean stop loses no served hit.
func (d *daemon) stop(ctx context.Context) error {
	err := d.server.Shutdown(ctx)
	if d.gossip != nil {
		if gerr := d.gossip.Stop(ctx); gerr != nil && err == nil {
			err = gerr
		}
	}
	d.closeListeners()
	return err
}

// closeListeners closes the listeners (a Unix listener removes its socket
// file) and then releases the socket's lock. Safe to call twice.
func (d *daemon) closeListeners() {
	for _, l := range d.listeners {
		l.Close()
	}
	d.unlock()
	d.unlock = func() {}
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
