package config

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/dthrottle/dthrottle/internal/limits"
)

// Allowed ranges, used by the rules of rules.go, which Validate checks and
// docs/configuration.md prints. dthrottle.toml documents each one beside
// its key.
const (
	minRate        = 1e-6            // tokens per second: one per 11.6 days
	maxRate        = 1e9             // tokens per second
	maxBurst       = limits.MaxBurst // tokens
	maxMaxTags     = 100000000
	maxMaxConns    = 1000000
	minMaxTagBytes = limits.MinTagBytes
	maxMaxTagBytes = limits.MaxLine // a longer line closes the connection anyway
	minInterval    = 10 * time.Millisecond
	maxInterval    = time.Hour
	maxTTL         = 255
	minMaxPacket   = limits.MinPacket // every IPv4 host accepts 576-byte datagrams
	maxMaxPacket   = 65000            // a round figure under limits.MaxPacket, the UDP payload limit
	maxMaxPeers    = 100000
	maxUnixPath    = 107 // sun_path holds 108 bytes with the final NUL
	maxIfName      = 15  // IFNAMSIZ less the final NUL
	minForgetAfter = time.Second
	maxForgetAfter = time.Hour
)

// The user-facing bounds must lie within the wire format's.
var _ [limits.MaxPacket - maxMaxPacket]struct{}

// Validate checks every value of c and returns an *Error for the first bad
// one, naming the key, its value and its allowed range, such as
//
//	config: limit.rate = 0: must be between 0.000001 and 1e9
//	config: policy[2] (login).burst = -1: must be between 1 and 1000000
//
// Policies are counted from 1 in the order written. An empty Policy.Name
// stands for its Prefix and an empty Policy.Action for "limit". Validate does
// not modify c and does no I/O: it does not resolve names or check that
// files exist.
func (c *Config) Validate() error {
	for _, check := range []func() *Error{c.validateListen, c.validateLimit, c.validatePolicies, c.validateGossip, c.validateRelay, c.validateAdmin, c.validateHTTP, c.validateSPOE, c.validateCharge, c.validateRLS, c.validateGubernator, c.validateLog, c.validateState, c.validatePaths} {
		if e := check(); e != nil {
			return e
		}
	}
	return nil
}

func (c *Config) validateListen() *Error {
	l := &c.Listen
	switch {
	case strings.IndexByte(l.Unix, 0) >= 0:
		return bad(key("listen", "unix"), quote(l.Unix), "must not contain a NUL byte")
	case len(l.Unix) > maxUnixPath:
		return bad(key("listen", "unix"), quote(l.Unix), fmt.Sprintf("must be at most %d bytes long (the kernel's limit for a socket path)", maxUnixPath))
	}
	if _, ok := parseMode(l.UnixMode); !ok {
		return bad(key("listen", "unix_mode"), quote(l.UnixMode), `must be 3 or 4 octal digits, from "0000" to "0777"`)
	}
	if l.TCP != "" {
		if e := checkAddr(key("listen", "tcp"), l.TCP, false, 0); e != nil {
			return e
		}
	}
	if l.Unix == "" && l.TCP == "" {
		return &Error{Key: "listen", Msg: "listen.unix and listen.tcp are both empty: at least one listener is required", path: []string{"listen"}, elem: -1}
	}
	if e := intRange(key("listen", "max_conns"), l.MaxConns); e != nil {
		return e
	}
	return intRange(key("listen", "max_tag_bytes"), l.MaxTagBytes)
}

func (c *Config) validateLimit() *Error {
	l := &c.Limit
	at := func(field string) keyRef { return key("limit", field) }
	if e := checkBucket(at, l.Rate, l.Burst, l.Limit, l.Per.Duration); e != nil {
		return e
	}
	if e := oneOf(at("quotas"), l.Quotas, quote(l.Quotas)); e != nil {
		return e
	}
	return intRange(key("limit", "max_tags"), c.Limit.MaxTags)
}

func (c *Config) validatePolicies() *Error {
	if len(c.Policy) > limits.MaxPolicies {
		return bad(key("policy"), strconv.Itoa(len(c.Policy))+" policies", fmt.Sprintf("must be at most %d", limits.MaxPolicies))
	}
	prefixes := map[string]string{} // prefix -> label of the policy that has it
	names := map[string]string{}
	for i, p := range c.Policy {
		name := cmp.Or(p.Name, p.Prefix)
		at := func(field string) keyRef {
			label := fmt.Sprintf("policy[%d]", i+1)
			if name != "" {
				label += " (" + name + ")"
			}
			return keyRef{label + "." + field, []string{"policy", field}, i}
		}
		switch {
		case p.Prefix == "":
			return bad(at("prefix"), quote(p.Prefix), "must not be empty")
		case strings.IndexByte(p.Prefix, '\n') >= 0:
			return bad(at("prefix"), quote(p.Prefix), "must not contain a newline (a tag is one line)")
		case prefixes[p.Prefix] != "":
			return bad(at("prefix"), quote(p.Prefix), "must be unique: "+prefixes[p.Prefix]+" has it too")
		case names[name] != "":
			return bad(at("name"), quote(name), "must be unique: "+names[name]+" has it too")
		}
		prefixes[p.Prefix] = fmt.Sprintf("policy[%d]", i+1)
		names[name] = prefixes[p.Prefix]
		if p.Partition != "" {
			if e := oneOf(at("partition"), p.Partition, quote(p.Partition)); e != nil {
				return e
			}
		}
		switch p.Action {
		case "", ActionLimit:
		case ActionAllow, ActionDeny:
			continue // rate and burst are not used
		default:
			return oneOf(at("action"), p.Action, quote(p.Action))
		}
		if e := checkBucket(at, p.Rate, p.Burst, p.Limit, p.Per.Duration); e != nil {
			return e
		}
		if p.Quotas != "" {
			if e := oneOf(at("quotas"), p.Quotas, quote(p.Quotas)); e != nil {
				return e
			}
		}
	}
	return nil
}

func (c *Config) validateGossip() *Error {
	g := &c.Gossip
	if e := durationRange(key("gossip", "interval"), g.Interval.Duration); e != nil {
		return e
	}
	if g.Group != "" {
		if e := checkAddr(key("gossip", "group"), g.Group, true, 1); e != nil {
			return e
		}
		host, _, _ := net.SplitHostPort(g.Group)
		if a, err := netip.ParseAddr(host); err != nil || !a.Is4() || !a.IsMulticast() {
			return bad(key("gossip", "group"), quote(g.Group), "host must be an IPv4 multicast address (224.0.0.0/4)")
		}
	}
	if n := g.Interface; len(n) > maxIfName || strings.ContainsAny(n, "/ \t\n\x00") {
		return bad(key("gossip", "interface"), quote(n), fmt.Sprintf("must be a network interface name: at most %d bytes, no \"/\" or blanks", maxIfName))
	}
	if e := intRange(key("gossip", "ttl"), g.TTL); e != nil {
		return e
	}
	if e := checkPeers("gossip", g.Peers); e != nil {
		return e
	}
	if e := checkAddr(key("gossip", "bind"), g.Bind, false, 0); e != nil {
		return e
	}
	// The multicast socket binds the group's port; the unicast socket
	// cannot bind the same one beside it.
	if g.Group != "" && len(g.Peers) > 0 {
		_, gp, _ := net.SplitHostPort(g.Group)
		if _, bp, _ := net.SplitHostPort(g.Bind); bp == gp {
			return bad(key("gossip", "bind"), quote(g.Bind), "must use another port than gossip.group when gossip.peers are set too")
		}
	}
	if e := intRange(key("gossip", "max_peers"), g.MaxPeers); e != nil {
		return e
	}
	if e := oneOf(key("gossip", "partition"), g.Partition, quote(g.Partition)); e != nil {
		return e
	}
	if e := durationRange(key("gossip", "forget_after"), g.ForgetAfter.Duration); e != nil {
		return e
	}
	if silent := limits.SilentAfter(g.Interval.Duration); c.Shares() && g.ForgetAfter.Duration <= silent {
		return bad(key("gossip", "forget_after"), quote(g.ForgetAfter.String()),
			fmt.Sprintf("must be longer than the silence timeout, %v at this interval, when a policy is under \"share\"", silent))
	}
	return intRange(key("gossip", "max_packet"), g.MaxPacket)
}

// checkPeers checks a list of peers, section.peers: each "host:port" with
// a port from 1, and each once.
func checkPeers(section string, peers []string) *Error {
	seen := map[string]int{}
	for i, p := range peers {
		at := keyRef{fmt.Sprintf("%s.peers[%d]", section, i+1), []string{section, "peers"}, -1}
		if e := checkAddr(at, p, true, 1); e != nil {
			return e
		}
		if j, dup := seen[p]; dup {
			return bad(at, quote(p), fmt.Sprintf("must be unique: %s.peers[%d] has it too", section, j+1))
		}
		seen[p] = i
	}
	return nil
}

func (c *Config) validateAdmin() *Error {
	if c.Admin.HTTP == "" {
		return nil
	}
	return checkAddr(key("admin", "http"), c.Admin.HTTP, false, 0)
}

// keyRef names a key for an error: its label in messages, and where to look
// for its line.
type keyRef struct {
	label string
	path  []string
	elem  int
}

func key(path ...string) keyRef {
	return keyRef{strings.Join(path, "."), path, -1}
}

// bad returns the error "LABEL = VALUE: RULE".
func bad(k keyRef, value, rule string) *Error {
	name := strings.Join(k.path, ".")
	if k.elem >= 0 {
		name = keyLabel(k.path, k.elem)
	}
	return &Error{Key: name, Msg: k.label + " = " + value + ": " + rule, path: k.path, elem: k.elem}
}

// checkAddr checks a "host:port" address. A listening address may leave the
// host empty (all interfaces) and use port 0 (any free port); a destination
// passes needHost and minPort 1.
func checkAddr(k keyRef, addr string, needHost bool, minPort int) *Error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		msg := err.Error()
		if ae, ok := err.(*net.AddrError); ok {
			msg = ae.Err
		}
		return bad(k, quote(addr), `must be "host:port" (`+msg+`)`)
	}
	if needHost && host == "" {
		return bad(k, quote(addr), `must be "host:port" with a host`)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || int(n) < minPort {
		return bad(k, quote(addr), fmt.Sprintf("port must be a number from %d to 65535", minPort))
	}
	return nil
}

// parseMode parses a unix_mode: 3 or 4 octal digits, at most 0777.
func parseMode(s string) (os.FileMode, bool) {
	if len(s) < 3 || len(s) > 4 || strings.Trim(s, "01234567") != "" {
		return 0, false
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o777 {
		return 0, false
	}
	return os.FileMode(m), true
}

func quote(s string) string { return strconv.Quote(s) }

func (c *Config) validateLog() *Error {
	if e := oneOf(key("log", "format"), c.Log.Format, quote(c.Log.Format)); e != nil {
		return e
	}
	return oneOf(key("log", "level"), c.Log.Level, quote(c.Log.Level))
}

func (c *Config) validateState() *Error {
	f := c.State.File
	switch {
	case strings.IndexByte(f, 0) >= 0:
		return bad(key("state", "file"), quote(f), "must not contain a NUL byte")
	case f != "" && (strings.HasSuffix(f, "/") || filepath.Base(f) == "." || filepath.Base(f) == ".."):
		return bad(key("state", "file"), quote(f), "must name a file, not a directory")
	}
	return nil
}
