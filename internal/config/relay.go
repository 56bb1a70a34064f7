package config

import (
	"fmt"
	"net"
)

// Relay configures relaying (docs/scaling.md): a node sends its hits to
// its segment's relays, which sum them, hold back the tags far below
// their limit, and pass one aggregate a tag on to every node, and to the
// relays of other segments. The zero Relay is not valid (Mode is ""):
// start from [Default], whose "off" is the protocol without relays.
type Relay struct {
	Mode  string   `toml:"mode" reload:"restart-serve"`   // "off": report to every peer; "use": through the segment's relays; "serve": be one of them
	Hold  float64  `toml:"hold"`                          // a relay holds a tag's sum until this share of its burst
	Peers []string `toml:"peers"`                         // relays of other segments, "host:port" (their relay.bind); mode "serve" only
	Bind  string   `toml:"bind" reload:"restart-serving"` // "host:port" where other segments' relays reach this one
}

// The relay modes.
const (
	RelayOff   = "off"   // report to every peer; apply any relay's aggregates
	RelayUse   = "use"   // report through the segment's relays heard
	RelayServe = "serve" // be one of the segment's relays, and report through them
)

// validateRelay checks the [relay] section.
func (c *Config) validateRelay() *Error {
	r := &c.Relay
	if e := oneOf(key("relay", "mode"), r.Mode, quote(r.Mode)); e != nil {
		return e
	}
	if r.Mode != RelayOff && c.Gossip.Group == "" && len(c.Gossip.Peers) == 0 {
		return bad(key("relay", "mode"), quote(r.Mode), "needs gossip.group or gossip.peers: relays are found among the peers")
	}
	if e := floatRange(key("relay", "hold"), r.Hold); e != nil {
		return e
	}
	if e := checkPeers("relay", r.Peers); e != nil {
		return e
	}
	if len(r.Peers) > 0 && r.Mode != RelayServe {
		return bad(key("relay", "peers"), fmt.Sprintf("%d peers", len(r.Peers)), `needs relay.mode = "serve": only relays join other segments`)
	}
	if e := checkAddr(key("relay", "bind"), r.Bind, false, 0); e != nil {
		return e
	}
	if r.Mode == RelayServe {
		_, bp, _ := net.SplitHostPort(r.Bind)
		if _, gp, _ := net.SplitHostPort(c.Gossip.Group); c.Gossip.Group != "" && gp == bp {
			return bad(key("relay", "bind"), quote(r.Bind), "must use another port than gossip.group")
		}
		if _, up, _ := net.SplitHostPort(c.Gossip.Bind); len(c.Gossip.Peers) > 0 && up == bp {
			return bad(key("relay", "bind"), quote(r.Bind), "must use another port than gossip.bind")
		}
	}
	return nil
}
