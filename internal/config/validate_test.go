package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/limits"
)

func TestValidateRanges(t *testing.T) {
	login := func(c *Config) *Policy {
		c.Policy = append(c.Policy, Policy{Name: "other", Prefix: "o:", Action: ActionAllow}, Policy{Name: "login", Prefix: "login:", Rate: 1, Burst: 1})
		return &c.Policy[1]
	}
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string // "" if valid, else the whole error text
	}{
		// listen
		{"unix off, tcp on", func(c *Config) { c.Listen.Unix, c.Listen.TCP = "", "127.0.0.1:7070" }, ""},
		{"unix abstract", func(c *Config) { c.Listen.Unix = "@dthrottle" }, ""},
		{"unix 107 bytes", func(c *Config) { c.Listen.Unix = "/" + strings.Repeat("a", 106) }, ""},
		{"unix 108 bytes", func(c *Config) { c.Listen.Unix = "/" + strings.Repeat("a", 107) },
			`config: listen.unix = "/` + strings.Repeat("a", 107) + `": must be at most 107 bytes long (the kernel's limit for a socket path)`},
		{"unix NUL", func(c *Config) { c.Listen.Unix = "/a\x00b" }, `config: listen.unix = "/a\x00b": must not contain a NUL byte`},
		{"no listener", func(c *Config) { c.Listen.Unix = "" }, "config: listen.unix and listen.tcp are both empty: at least one listener is required"},
		{"unix_mode 000", func(c *Config) { c.Listen.UnixMode = "000" }, ""},
		{"unix_mode 0777", func(c *Config) { c.Listen.UnixMode = "0777" }, ""},
		{"unix_mode 1777", func(c *Config) { c.Listen.UnixMode = "1777" }, `config: listen.unix_mode = "1777": must be 3 or 4 octal digits, from "0000" to "0777"`},
		{"unix_mode 0680", func(c *Config) { c.Listen.UnixMode = "0680" }, `config: listen.unix_mode = "0680": must be 3 or 4 octal digits, from "0000" to "0777"`},
		{"unix_mode 66", func(c *Config) { c.Listen.UnixMode = "66" }, `config: listen.unix_mode = "66": must be 3 or 4 octal digits, from "0000" to "0777"`},
		{"unix_mode 00660", func(c *Config) { c.Listen.UnixMode = "00660" }, `config: listen.unix_mode = "00660": must be 3 or 4 octal digits, from "0000" to "0777"`},
		{"unix_mode +660", func(c *Config) { c.Listen.UnixMode = "+660" }, `config: listen.unix_mode = "+660": must be 3 or 4 octal digits, from "0000" to "0777"`},
		{"tcp any host, port 0", func(c *Config) { c.Listen.TCP = ":0" }, ""},
		{"tcp ipv6", func(c *Config) { c.Listen.TCP = "[::1]:7070" }, ""},
		{"tcp no port", func(c *Config) { c.Listen.TCP = "127.0.0.1" }, `config: listen.tcp = "127.0.0.1": must be "host:port" (missing port in address)`},
		{"tcp empty port", func(c *Config) { c.Listen.TCP = "127.0.0.1:" }, `config: listen.tcp = "127.0.0.1:": port must be a number from 0 to 65535`},
		{"tcp port 65536", func(c *Config) { c.Listen.TCP = "127.0.0.1:65536" }, `config: listen.tcp = "127.0.0.1:65536": port must be a number from 0 to 65535`},
		{"tcp named port", func(c *Config) { c.Listen.TCP = "127.0.0.1:http" }, `config: listen.tcp = "127.0.0.1:http": port must be a number from 0 to 65535`},
		{"max_conns 1", func(c *Config) { c.Listen.MaxConns = 1 }, ""},
		{"max_conns 1000000", func(c *Config) { c.Listen.MaxConns = 1000000 }, ""},
		{"max_conns 0", func(c *Config) { c.Listen.MaxConns = 0 }, "config: listen.max_conns = 0: must be between 1 and 1000000"},
		{"max_conns 1000001", func(c *Config) { c.Listen.MaxConns = 1000001 }, "config: listen.max_conns = 1000001: must be between 1 and 1000000"},
		{"max_tag_bytes 64", func(c *Config) { c.Listen.MaxTagBytes = 64 }, ""},
		{"max_tag_bytes 65536", func(c *Config) { c.Listen.MaxTagBytes = 65536 }, ""},
		{"max_tag_bytes 63", func(c *Config) { c.Listen.MaxTagBytes = 63 }, "config: listen.max_tag_bytes = 63: must be between 64 and 65536"},
		{"max_tag_bytes 65537", func(c *Config) { c.Listen.MaxTagBytes = 65537 }, "config: listen.max_tag_bytes = 65537: must be between 64 and 65536"},

		// limit
		{"rate 1e-6", func(c *Config) { c.Limit.Rate = 1e-6 }, ""},
		{"rate 1e9", func(c *Config) { c.Limit.Rate = 1e9 }, ""},
		{"rate 0", func(c *Config) { c.Limit.Rate = 0 }, "config: limit.rate = 0: must be between 0.000001 and 1e9 (tokens per second)"},
		{"rate 9e-7", func(c *Config) { c.Limit.Rate = 9e-7 }, "config: limit.rate = 9e-07: must be between 0.000001 and 1e9 (tokens per second)"},
		{"rate -1", func(c *Config) { c.Limit.Rate = -1 }, "config: limit.rate = -1: must be between 0.000001 and 1e9 (tokens per second)"},
		{"rate 1.1e9", func(c *Config) { c.Limit.Rate = 1.1e9 }, "config: limit.rate = 1.1e+09: must be between 0.000001 and 1e9 (tokens per second)"},
		{"rate NaN", func(c *Config) { c.Limit.Rate = math.NaN() }, "config: limit.rate = NaN: must be between 0.000001 and 1e9 (tokens per second)"},
		{"rate +Inf", func(c *Config) { c.Limit.Rate = math.Inf(1) }, "config: limit.rate = +Inf: must be between 0.000001 and 1e9 (tokens per second)"},
		{"burst 1", func(c *Config) { c.Limit.Burst = 1 }, ""},
		{"burst 1000000", func(c *Config) { c.Limit.Burst = 1000000 }, ""},
		{"burst 0", func(c *Config) { c.Limit.Burst = 0 }, "config: limit.burst = 0: must be between 1 and 1000000"},
		{"burst 1000001", func(c *Config) { c.Limit.Burst = 1000001 }, "config: limit.burst = 1000001: must be between 1 and 1000000"},
		{"max_tags 1", func(c *Config) { c.Limit.MaxTags = 1 }, ""},
		{"max_tags 1e8", func(c *Config) { c.Limit.MaxTags = 100000000 }, ""},
		{"max_tags 0", func(c *Config) { c.Limit.MaxTags = 0 }, "config: limit.max_tags = 0: must be between 1 and 100000000"},
		{"max_tags 1e8+1", func(c *Config) { c.Limit.MaxTags = 100000001 }, "config: limit.max_tags = 100000001: must be between 1 and 100000000"},

		// policy
		{"policy rate 1e9", func(c *Config) { login(c).Rate = 1e9 }, ""},
		{"policy rate 0", func(c *Config) { login(c).Rate = 0 }, "config: policy[2] (login).rate = 0: must be between 0.000001 and 1e9 (tokens per second)"},
		{"policy burst 1000000", func(c *Config) { login(c).Burst = 1000000 }, ""},
		{"policy burst -1", func(c *Config) { login(c).Burst = -1 }, "config: policy[2] (login).burst = -1: must be between 1 and 1000000"},
		{"policy action limit", func(c *Config) { login(c).Action = ActionLimit }, ""},
		{"policy action Limit", func(c *Config) { login(c).Action = "Limit" }, `config: policy[2] (login).action = "Limit": must be one of "limit", "allow", "deny"`},
		{"policy allow ignores rate", func(c *Config) { p := login(c); p.Action, p.Rate, p.Burst = ActionAllow, -5, -5 }, ""},
		{"policy deny ignores rate", func(c *Config) { p := login(c); p.Action, p.Rate, p.Burst = ActionDeny, 0, 0 }, ""},
		{"policy unnamed", func(c *Config) { login(c).Name = "" }, ""},
		{"policy unnamed no prefix", func(c *Config) { p := login(c); p.Name, p.Prefix = "", "" }, `config: policy[2].prefix = "": must not be empty`},

		// gossip
		{"partition share", func(c *Config) { c.Gossip.Partition = "share" }, ""},
		{"partition half", func(c *Config) { c.Gossip.Partition = "half" }, `config: gossip.partition = "half": must be "whole" or "share"`},
		{"policy partition share", func(c *Config) { login(c).Partition = "share" }, ""},
		{"policy partition bad", func(c *Config) { login(c).Partition = "all" },
			`config: policy[2] (login).partition = "all": must be one of "", "whole", "share"`},
		{"forget_after 1s", func(c *Config) { c.Gossip.ForgetAfter.Duration = time.Second }, ""},
		{"forget_after 0", func(c *Config) { c.Gossip.ForgetAfter.Duration = 0 }, `config: gossip.forget_after = "0s": must be between 1s and 1h`},
		{"forget_after within silence, share", func(c *Config) {
			c.Gossip.ForgetAfter.Duration, c.Gossip.Partition = 3*time.Second, "share"
		}, `config: gossip.forget_after = "3s": must be longer than the silence timeout, 3s at this interval, when a policy is under "share"`},
		{"forget_after within silence, a policy's share", func(c *Config) {
			c.Gossip.ForgetAfter.Duration, c.Gossip.Interval.Duration = time.Minute, time.Minute
			login(c).Partition = "share"
		}, `config: gossip.forget_after = "1m0s": must be longer than the silence timeout, 3m0s at this interval, when a policy is under "share"`},
		{"interval 10ms", func(c *Config) { c.Gossip.Interval.Duration = 10 * time.Millisecond }, ""},
		{"interval 1h", func(c *Config) { c.Gossip.Interval.Duration = time.Hour }, ""},
		{"interval 9ms", func(c *Config) { c.Gossip.Interval.Duration = 9 * time.Millisecond }, `config: gossip.interval = "9ms": must be between 10ms and 1h`},
		{"interval 1h1ns", func(c *Config) { c.Gossip.Interval.Duration = time.Hour + 1 }, `config: gossip.interval = "1h0m0.000000001s": must be between 10ms and 1h`},
		{"interval -1s", func(c *Config) { c.Gossip.Interval.Duration = -time.Second }, `config: gossip.interval = "-1s": must be between 10ms and 1h`},
		{"group ipv4", func(c *Config) { c.Gossip.Group = "239.255.77.77:7777" }, ""},
		{"log json debug", func(c *Config) { c.Log.Format, c.Log.Level = "json", "debug" }, ""},
		{"log format", func(c *Config) { c.Log.Format = "xml" }, `config: log.format = "xml": must be "text" or "json"`},
		{"log level", func(c *Config) { c.Log.Level = "loud" }, `config: log.level = "loud": must be one of "debug", "info", "warn", "error"`},
		{"group ipv6", func(c *Config) { c.Gossip.Group = "[ff02::77]:7777" }, `config: gossip.group = "[ff02::77]:7777": host must be an IPv4 multicast address (224.0.0.0/4)`},
		{"bind on the group's port with peers", func(c *Config) {
			c.Gossip.Group, c.Gossip.Peers, c.Gossip.Bind = "239.1.2.3:7777", []string{"10.0.0.2:7778"}, ":7777"
		}, `config: gossip.bind = ":7777": must use another port than gossip.group when gossip.peers are set too`},
		{"bind on another port with peers", func(c *Config) {
			c.Gossip.Group, c.Gossip.Peers, c.Gossip.Bind = "239.1.2.3:7777", []string{"10.0.0.2:7778"}, ":7778"
		}, ""},
		{"group unicast", func(c *Config) { c.Gossip.Group = "10.0.0.1:7777" }, `config: gossip.group = "10.0.0.1:7777": host must be an IPv4 multicast address (224.0.0.0/4)`},
		{"group name", func(c *Config) { c.Gossip.Group = "example.com:7777" }, `config: gossip.group = "example.com:7777": host must be an IPv4 multicast address (224.0.0.0/4)`},
		{"group no host", func(c *Config) { c.Gossip.Group = ":7777" }, `config: gossip.group = ":7777": must be "host:port" with a host`},
		{"group port 0", func(c *Config) { c.Gossip.Group = "239.1.1.1:0" }, `config: gossip.group = "239.1.1.1:0": port must be a number from 1 to 65535`},
		{"group no port", func(c *Config) { c.Gossip.Group = "239.1.1.1" }, `config: gossip.group = "239.1.1.1": must be "host:port" (missing port in address)`},
		{"interface 15 bytes", func(c *Config) { c.Gossip.Interface = "enp0s31f6abcdef" }, ""},
		{"interface 16 bytes", func(c *Config) { c.Gossip.Interface = "enp0s31f6abcdefg" }, `config: gossip.interface = "enp0s31f6abcdefg": must be a network interface name: at most 15 bytes, no "/" or blanks`},
		{"interface slash", func(c *Config) { c.Gossip.Interface = "eth/0" }, `config: gossip.interface = "eth/0": must be a network interface name: at most 15 bytes, no "/" or blanks`},
		{"ttl 0", func(c *Config) { c.Gossip.TTL = 0 }, ""},
		{"ttl 255", func(c *Config) { c.Gossip.TTL = 255 }, ""},
		{"ttl -1", func(c *Config) { c.Gossip.TTL = -1 }, "config: gossip.ttl = -1: must be between 0 and 255"},
		{"ttl 256", func(c *Config) { c.Gossip.TTL = 256 }, "config: gossip.ttl = 256: must be between 0 and 255"},
		{"peers", func(c *Config) { c.Gossip.Peers = []string{"10.0.0.2:7777", "node3.example:1", "[fe80::1%eth0]:65535"} }, ""},
		{"peer no port", func(c *Config) { c.Gossip.Peers = []string{"10.0.0.2:7777", "10.0.0.3"} }, `config: gossip.peers[2] = "10.0.0.3": must be "host:port" (missing port in address)`},
		{"peer no host", func(c *Config) { c.Gossip.Peers = []string{":7777"} }, `config: gossip.peers[1] = ":7777": must be "host:port" with a host`},
		{"peer port 0", func(c *Config) { c.Gossip.Peers = []string{"a:0"} }, `config: gossip.peers[1] = "a:0": port must be a number from 1 to 65535`},
		{"peer twice", func(c *Config) { c.Gossip.Peers = []string{"a:1", "b:1", "a:1"} }, `config: gossip.peers[3] = "a:1": must be unique: gossip.peers[1] has it too`},
		{"bind host", func(c *Config) { c.Gossip.Bind = "10.0.0.1:7777" }, ""},
		{"bind no port", func(c *Config) { c.Gossip.Bind = "" }, `config: gossip.bind = "": must be "host:port" (missing port in address)`},
		{"max_packet 512", func(c *Config) { c.Gossip.MaxPacket = 512 }, ""},
		{"max_packet 65000", func(c *Config) { c.Gossip.MaxPacket = 65000 }, ""},
		{"max_packet 511", func(c *Config) { c.Gossip.MaxPacket = 511 }, "config: gossip.max_packet = 511: must be between 512 and 65000"},
		{"max_packet 65001", func(c *Config) { c.Gossip.MaxPacket = 65001 }, "config: gossip.max_packet = 65001: must be between 512 and 65000"},

		// admin
		{"admin loopback", func(c *Config) { c.Admin.HTTP = "127.0.0.1:7071" }, ""},
		{"admin port 0", func(c *Config) { c.Admin.HTTP = "localhost:0" }, ""},
		{"admin no port", func(c *Config) { c.Admin.HTTP = "localhost" }, `config: admin.http = "localhost": must be "host:port" (missing port in address)`},
		{"admin too many colons", func(c *Config) { c.Admin.HTTP = "::1:7071" }, `config: admin.http = "::1:7071": must be "host:port" (too many colons in address)`},

		// state
		{"state file", func(c *Config) { c.State.File = "/var/lib/dthrottle/state" }, ""},
		{"state file relative", func(c *Config) { c.State.File = "state" }, ""},
		{"state file a directory", func(c *Config) { c.State.File = "/var/lib/dthrottle/" }, `config: state.file = "/var/lib/dthrottle/": must name a file, not a directory`},
		{"state file dot", func(c *Config) { c.State.File = "/var/lib/." }, `config: state.file = "/var/lib/.": must name a file, not a directory`},
		{"state file NUL", func(c *Config) { c.State.File = "/a\x00b" }, `config: state.file = "/a\x00b": must not contain a NUL byte`},
		{"warm start off", func(c *Config) { c.Gossip.WarmStart = false }, ""},
	} {
		c := Default()
		tc.set(&c)
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: Validate() = %v, want nil", tc.name, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("%s: Validate() = %v\nwant %s", tc.name, err, tc.want)
		}
	}
}

// TestValidateLines checks that Parse points a range error at the key's line.
func TestValidateLines(t *testing.T) {
	for _, tc := range []struct {
		src  string
		line int
		key  string
	}{
		{"[listen]\nmax_conns = 0\n", 2, "listen.max_conns"},
		{"# comment\n\n[limit]\nburst = 3\nrate = 0\n", 5, "limit.rate"},
		{"[gossip]\npeers = [\n  \"a:1\",\n  \"a\",\n]\n", 2, "gossip.peers"},
		{"[listen]\nunix = \"\"\n", 1, "listen"},
		{"listen.unix = \"\"\n", 0, "listen"}, // no header to point at
		{"[[policy]]\nprefix = \"a\"\naction = \"allow\"\n\n[[policy]]\nprefix = \"b\"\nrate = 1\n\nburst = 0\n", 9, "policy[2].burst"},
		{"[admin]\nhttp = \"x\"\n", 2, "admin.http"},
	} {
		_, err := Parse([]byte(tc.src))
		e, ok := errors.AsType[*Error](err)
		if !ok || e.Line != tc.line || e.Key != tc.key {
			t.Errorf("Parse(%q) = %v (%#v), want line %d, key %s", tc.src, err, err, tc.line, tc.key)
		}
	}
}

func TestValidateTooManyPolicies(t *testing.T) {
	c := Default()
	for i := range limits.MaxPolicies + 1 {
		c.Policy = append(c.Policy, Policy{Prefix: "p" + strconv.Itoa(i) + ":", Rate: 1, Burst: 1})
	}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "must be at most 32766") {
		t.Fatalf("validating %d policies: %v", len(c.Policy), err)
	}
	c.Policy = c.Policy[:limits.MaxPolicies]
	if err := c.Validate(); err != nil {
		t.Fatalf("validating %d policies: %v", len(c.Policy), err)
	}
}

func TestValidateMaxPeers(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{
		{0, ""},
		{100000, ""},
		{-1, "config: gossip.max_peers = -1: must be between 0 and 100000"},
		{100001, "config: gossip.max_peers = 100001: must be between 0 and 100000"},
	} {
		c := Default()
		c.Gossip.MaxPeers = tc.n
		err := c.Validate()
		if got := fmt.Sprint(err); (tc.want == "" && err != nil) || (tc.want != "" && got != tc.want) {
			t.Errorf("max_peers %d: %v, want %q", tc.n, err, tc.want)
		}
	}
}
