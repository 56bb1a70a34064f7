package config

import (
	"testing"
)

func TestValidateRelay(t *testing.T) {
	group := func(c *Config) { c.Gossip.Group = "239.1.1.1:7777" }
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string // "" if valid, else the whole error text
	}{
		{"default", func(c *Config) {}, ""},
		{"use with a group", func(c *Config) { group(c); c.Relay.Mode = "use" }, ""},
		{"serve with peers", func(c *Config) { c.Gossip.Peers = []string{"10.0.0.2:7777"}; c.Relay.Mode = "serve" }, ""},
		{"serve, other segments", func(c *Config) {
			group(c)
			c.Relay.Mode, c.Relay.Peers = "serve", []string{"10.1.0.1:7778", "relay.b.example:7778"}
		}, ""},
		{"mode unknown", func(c *Config) { group(c); c.Relay.Mode = "on" }, `config: relay.mode = "on": must be "off", "use" or "serve"`},
		{"mode empty", func(c *Config) { c.Relay.Mode = "" }, `config: relay.mode = "": must be "off", "use" or "serve"`},
		{"use without gossip", func(c *Config) { c.Relay.Mode = "use" }, `config: relay.mode = "use": needs gossip.group or gossip.peers: relays are found among the peers`},
		{"hold 0", func(c *Config) { c.Relay.Hold = 0 }, ""},
		{"hold 1", func(c *Config) { c.Relay.Hold = 1 }, ""},
		{"hold -0.1", func(c *Config) { c.Relay.Hold = -0.1 }, "config: relay.hold = -0.1: must be between 0 (hold nothing back) and 1 (a whole burst)"},
		{"hold 1.5", func(c *Config) { c.Relay.Hold = 1.5 }, "config: relay.hold = 1.5: must be between 0 (hold nothing back) and 1 (a whole burst)"},
		{"peers without serve", func(c *Config) { group(c); c.Relay.Mode, c.Relay.Peers = "use", []string{"10.1.0.1:7778"} },
			`config: relay.peers = 1 peers: needs relay.mode = "serve": only relays join other segments`},
		{"peer no port", func(c *Config) { group(c); c.Relay.Mode, c.Relay.Peers = "serve", []string{"10.1.0.1"} },
			`config: relay.peers[1] = "10.1.0.1": must be "host:port" (missing port in address)`},
		{"peer twice", func(c *Config) {
			group(c)
			c.Relay.Mode, c.Relay.Peers = "serve", []string{"10.1.0.1:7778", "10.1.0.1:7778"}
		}, `config: relay.peers[2] = "10.1.0.1:7778": must be unique: relay.peers[1] has it too`},
		{"bind bad port", func(c *Config) { c.Relay.Bind = ":70000" }, `config: relay.bind = ":70000": port must be a number from 0 to 65535`},
		{"bind on the group's port", func(c *Config) { group(c); c.Relay.Mode, c.Relay.Bind = "serve", ":7777" },
			`config: relay.bind = ":7777": must use another port than gossip.group`},
		{"bind on gossip.bind", func(c *Config) {
			c.Gossip.Peers = []string{"10.0.0.2:7777"}
			c.Relay.Mode, c.Relay.Bind = "serve", ":7777"
		}, `config: relay.bind = ":7777": must use another port than gossip.bind`},
	} {
		c := Default()
		tc.set(&c)
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want valid", tc.name, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("%s: %v\nwant %s", tc.name, err, tc.want)
		}
	}
}

func TestParseRelay(t *testing.T) {
	c, err := Parse([]byte("[gossip]\ngroup = \"239.1.1.1:7777\"\n[relay]\nmode = \"serve\"\nhold = 0.25\npeers = [\"10.1.0.1:7778\"]\nbind = \"10.0.0.1:7778\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Relay; r.Mode != "serve" || r.Hold != 0.25 || len(r.Peers) != 1 || r.Bind != "10.0.0.1:7778" {
		t.Errorf("parsed %+v", r)
	}
	if _, err := Parse([]byte("[relay]\nmode = \"serve\"\n")); err == nil || err.Error() != `config: line 2: relay.mode = "serve": needs gossip.group or gossip.peers: relays are found among the peers` {
		t.Errorf("serve without gossip: %v", err)
	}
	if _, err := Parse([]byte("[relay]\nhold = \"half\"\n")); err == nil || err.Error() != `config: line 2: relay.hold: must be a number, not a string` {
		t.Errorf("hold as a string: %v", err)
	}
}
