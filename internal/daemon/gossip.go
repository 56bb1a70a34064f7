package daemon

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"

	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/gossip"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
)

// gossipRun is the running gossip: the node and, when peers are
// configured, the unicast transport a reload gives new peers to, and
// which learns peers.
type gossipRun struct {
	node    *gossip.Node
	unicast *transport.UnicastTransport
	group   bool // a multicast group is configured
	relay   relayRun
}

// learnMax is how many peers the unicast transport learns: max_peers with
// a secret, none without (anyone could make a node send to any address).
func learnMax(cfg config.Gossip, key []byte) int {
	if key == nil {
		return 0
	}
	return cfg.MaxPeers
}

// found says how this node came to send to a peer heard from addr.
func (g *gossipRun) found(addr string) string {
	if g.unicast != nil {
		if f := g.unicast.Found(addr); f != "" {
			return f
		}
	}
	if g.group {
		return transport.FoundMulticast
	}
	return ""
}

// startGossip opens the configured transports (or has open tell it which)
// and builds the node that reports the table's hits to the peers and
// applies theirs; Run starts it. It returns nil when no group and no peers
// are configured: then nothing leaves the host.
func (d *Daemon) startGossip(full config.Config, open func(config.Gossip) (transport.Transport, error)) (*gossipRun, error) {
	cfg := full.Gossip
	if cfg.Group == "" && len(cfg.Peers) == 0 {
		return nil, nil
	}
	log := d.log
	key, err := readSecret(cfg.SecretFile, log)
	if err != nil {
		return nil, err
	}
	run := &gossipRun{}
	var t transport.Transport
	if open != nil {
		t, err = open(cfg)
	} else {
		t, run.unicast, err = openUDP(cfg, log)
	}
	if err != nil {
		return nil, err
	}
	var lerr error
	switch {
	case open == nil:
		lerr = run.relay.openLink(full.Relay, log)
	case d.relayLink != nil:
		lerr = run.relay.useLink(full.Relay, d.relayLink)
	}
	if lerr != nil {
		t.Close()
		return nil, lerr
	}
	var disc gossip.Discovery
	if run.unicast != nil {
		run.unicast.SetLearning(learnMax(cfg, key))
		disc = run.unicast // learns only under a key: see learnMax
	}
	run.group = cfg.Group != ""
	table := d.table
	node, err := gossip.NewNode(gossip.Config{
		Interval:    cfg.Interval.Duration,
		MaxPacket:   cfg.MaxPacket,
		Key:         key,
		Fingerprint: table.Fingerprint(),
		Drain:       table.Drain,
		Apply:       table.SpendBatch,
		Discovery:   disc,
		Relay:       run.relay.relayConfig(full, table),
		Export:      warmExport(table),
		Merge:       warmMerge(table),
		Top:         d.top.Report,
		HeardTop:    d.top.Heard,
		ForgetAfter: cfg.ForgetAfter.Duration,
		Members:     d.setShare,
		Logger:      log,
	}, t)
	if err != nil {
		t.Close()
		if run.relay.link != nil {
			run.relay.link.Close()
		}
		return nil, err
	}
	log.Info("gossip: started", "node", fmt.Sprintf("%016x", node.ID()), "interval", cfg.Interval.Duration,
		"signed", key != nil, "fingerprint", fmt.Sprintf("%016x", table.Fingerprint()), "relay", full.Relay.Mode)
	run.node = node
	return run, nil
}

// openUDP opens the multicast and unicast sockets cfg names, as one
// transport; unicast is the one a reload gives new peers to.
func openUDP(cfg config.Gossip, log *slog.Logger) (_ transport.Transport, unicast *transport.UnicastTransport, err error) {
	var ts []transport.Transport
	if cfg.Group != "" {
		t, err := transport.ListenMulticast(transport.MulticastConfig{Group: cfg.Group, Interface: cfg.Interface, TTL: cfg.TTL, Logger: log})
		if err != nil {
			return nil, nil, fmt.Errorf("gossip multicast %s: %w", cfg.Group, err)
		}
		ts = append(ts, t)
		log.Info("gossip: multicast", "group", cfg.Group, "interface", cfg.Interface, "ttl", cfg.TTL)
	}
	if len(cfg.Peers) > 0 {
		t, err := transport.ListenUnicast(transport.UnicastConfig{Bind: cfg.Bind, Peers: cfg.Peers, Logger: log})
		if err != nil {
			for _, t := range ts {
				t.Close()
			}
			return nil, nil, fmt.Errorf("gossip unicast %s: %w", cfg.Bind, err)
		}
		ts = append(ts, t)
		unicast = t
		log.Info("gossip: unicast", "bind", t.LocalAddr().String(), "peers", len(cfg.Peers))
	}
	return transport.Multi(ts...), unicast, nil
}

// readSecret reads the HMAC key from path ("" means none). Surrounding
// white space is not part of the key. A key others can read is refused:
// anyone who has it can forge reports.
func readSecret(path string, log *slog.Logger) ([]byte, error) {
	if path == "" {
		log.Warn("gossip: no secret_file: reports are neither signed nor checked; anyone on the network can spend tags")
		return nil, nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("gossip secret: %w", err)
	}
	if fi.Mode().Perm()&0o007 != 0 {
		return nil, fmt.Errorf("gossip secret %s: mode %#o lets others read it; chmod o-rwx", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gossip secret: %w", err)
	}
	key := bytes.TrimSpace(b)
	if len(key) < 16 {
		return nil, fmt.Errorf("gossip secret %s: %d bytes, want at least 16", path, len(key))
	}
	return key, nil
}
