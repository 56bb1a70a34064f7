package daemon

import (
	"fmt"
	"slices"

	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/gossip"
)

// Reload rereads the config file and applies it without losing bucket
// state: policies, rates, bursts, dry runs, partitions, max_tags,
// max_tag_bytes, the gossip interval, secret, max_packet, max_peers,
// peers and forget_after, relay.mode, relay.hold and relay.peers,
// http.refuse_status, state.file (the file saved to on stop) and the log
// level change live.
// A file that fails validation changes nothing and is logged and counted.
// Settings read only at start (see needsRestart) are logged as needing a
// restart and keep their running value. The Notifier hears of the reload, and an Event
// reports its outcome.
func (d *Daemon) Reload() error {
	d.notify.Reloading()
	restart, err := d.reload()
	d.mu.Lock()
	if err != nil {
		d.reloadFailures++
	} else {
		d.reloads++
	}
	d.mu.Unlock()
	if err != nil {
		d.log.Error("reload failed: keeping the running config", "err", err)
		d.event(Event{Kind: ReloadFailed, Err: err})
	} else {
		d.event(Event{Kind: Reloaded, Keys: restart})
	}
	d.notify.Ready()
	return err
}

// reload applies the file, returning the changed settings that need a
// restart.
func (d *Daemon) reload() ([]string, error) {
	if d.path == "" {
		return nil, fmt.Errorf("running on built-in defaults: no config file to reload")
	}
	next, err := config.Load(d.path)
	if err != nil {
		return nil, err
	}
	if err := next.CheckPaths(ConfigFile(d.path)...); err != nil {
		return nil, err
	}
	d.mu.Lock()
	cur := d.cfg
	d.mu.Unlock()
	restart := needsRestart(cur, next)
	for _, key := range restart {
		d.log.Warn("reload: change needs a restart to take effect", "key", key)
	}
	var key []byte
	if d.gossip != nil {
		if key, err = readSecret(next.Gossip.SecretFile, d.log); err != nil {
			return nil, err
		}
	}
	if err := d.reconfigureTable(d.now(), next); err != nil {
		return nil, err
	}
	if d.gossip != nil {
		if err := d.gossip.node.Update(gossip.Update{Interval: next.Gossip.Interval.Duration,
			MaxPacket: next.Gossip.MaxPacket, Key: key, Fingerprint: d.table.Fingerprint()}); err != nil {
			return nil, err
		}
		d.gossip.node.SetForgetAfter(next.Gossip.ForgetAfter.Duration)
		if d.gossip.unicast != nil {
			d.gossip.unicast.SetLearning(learnMax(next.Gossip, key))
		}
		if d.gossip.unicast != nil && !slices.Equal(cur.Gossip.Peers, next.Gossip.Peers) {
			if err := d.gossip.unicast.SetPeers(next.Gossip.Peers); err != nil {
				return nil, err
			}
		}
		if err := d.gossip.relay.reloadRelay(d.gossip.node, cur, next, d.table); err != nil {
			return nil, err
		}
	}
	d.reloadWays(next)
	if d.level != nil {
		d.level.Set(next.Log.SlogLevel())
	}
	d.mu.Lock()
	d.cfg = next
	d.mu.Unlock()
	rate, burst := next.Limit.Bucket()
	d.log.Info("reloaded", "config", d.path, "rate", rate, "burst", burst,
		"policies", len(next.Policy), "max_tags", next.Limit.MaxTags, "fingerprint", fmt.Sprintf("%016x", d.table.Fingerprint()))
	return restart, nil
}

// needsRestart names the settings that differ between cur and next and
// cannot change while running: the sockets and servers opened at start,
// the log format, turning gossip transports on or off, and becoming a
// relay. Each is declared by a reload tag on its field in package config.
func needsRestart(cur, next config.Config) []string {
	return config.RestartKeys(cur, next)
}
