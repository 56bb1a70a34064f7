package config

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// HAProxy configures dthrottled as a peer of HAProxy's stick tables
// (package hapeers): a listener HAProxy's "peers" section connects to,
// the name it gives dthrottled, and the tables whose counters become
// hits and whose gpt0 flag dthrottled sets. The zero HAProxy is not
// valid (MaxKeys is 0): start from [Default].
type HAProxy struct {
	Listen        string   `toml:"listen" reload:"restart"`         // "host:port" HAProxy's peers section connects to, e.g. "127.0.0.1:7076"; "" disables
	Name          string   `toml:"name" reload:"restart"`           // dthrottled's name in HAProxy's peers section
	Peers         []string `toml:"peers" reload:"restart"`          // HAProxy's own peer names (localpeer) accepted; empty accepts any
	Tables        []string `toml:"tables" reload:"restart"`         // the stick tables followed, by name ("web")
	Counter       string   `toml:"counter" reload:"restart"`        // the data type that counts the requests HAProxy served
	Prefix        string   `toml:"prefix" reload:"restart"`         // put before each key to make its tag, e.g. "web:" to fall under the policy of that prefix
	MaxKeys       int      `toml:"max_keys" reload:"restart"`       // most HAProxy entries remembered
	MaxConns      int      `toml:"max_conns" reload:"restart"`      // most HAProxy processes connected at once
	CheckInterval Duration `toml:"check_interval" reload:"restart"` // how often the entries are checked for hits from elsewhere and buckets refilled
}

// Allowed values of the [haproxy] section, used by its rules in rules.go.
// dthrottle.toml documents each one beside its key.
const (
	maxHAProxyKeys     = 100000000
	maxHAProxyConns    = 1000
	maxHAProxyTables   = 64
	maxHAProxyName     = 64
	minHAProxyInterval = time.Millisecond
	maxHAProxyInterval = 10 * time.Second
)

// haproxyCounters are the values of HAProxy.Counter (hapeers.Counters).
var haproxyCounters = []string{"gpc0", "gpc1", "gpc", "http_req_cnt"}

// validateHAProxy checks the HAProxy peer's keys.
func (c *Config) validateHAProxy() *Error {
	h := &c.HAProxy
	k := key("haproxy", "listen")
	if h.Listen != "" {
		if e := checkAddr(k, h.Listen, false, 0); e != nil {
			return e
		}
		if !strings.HasSuffix(h.Listen, ":0") {
			for _, other := range []struct{ name, addr string }{{"listen.tcp", c.Listen.TCP}, {"listen.charge_tcp", c.Listen.ChargeTCP},
				{"admin.http", c.Admin.HTTP}, {"http.listen", c.HTTP.Listen}, {"spoe.listen", c.SPOE.Listen}, {"rls.listen", c.RLS.Listen},
				{"gubernator.grpc", c.Gubernator.GRPC}, {"gubernator.http", c.Gubernator.HTTP}} {
				if h.Listen == other.addr {
					return bad(k, quote(h.Listen), "must be another address than "+other.name)
				}
			}
		}
		if len(h.Tables) == 0 {
			return bad(key("haproxy", "tables"), "[]", "must name at least one table when haproxy.listen is set")
		}
	}
	if e := peerName(key("haproxy", "name"), h.Name); e != nil {
		return e
	}
	for _, p := range h.Peers {
		if e := peerName(key("haproxy", "peers"), p); e != nil {
			return e
		}
	}
	if len(h.Tables) > maxHAProxyTables {
		return bad(key("haproxy", "tables"), fmt.Sprint(len(h.Tables), " tables"), fmt.Sprintf("must name at most %d tables", maxHAProxyTables))
	}
	for i, t := range h.Tables {
		if e := peerName(key("haproxy", "tables"), strings.TrimPrefix(t, "/")); e != nil {
			return e
		}
		if slices.Contains(h.Tables[:i], t) {
			return bad(key("haproxy", "tables"), quote(t), "must name each table once")
		}
	}
	if e := oneOf(key("haproxy", "counter"), h.Counter, quote(h.Counter)); e != nil {
		return e
	}
	if strings.ContainsAny(h.Prefix, "\n\r\x00") {
		return bad(key("haproxy", "prefix"), quote(h.Prefix), "must not contain a newline or NUL")
	}
	if e := intRange(key("haproxy", "max_keys"), h.MaxKeys); e != nil {
		return e
	}
	if e := intRange(key("haproxy", "max_conns"), h.MaxConns); e != nil {
		return e
	}
	return durationRange(key("haproxy", "check_interval"), h.CheckInterval.Duration)
}

// peerName checks a name of HAProxy's peers section: 1 to maxHAProxyName
// bytes of letters, digits and ".-_:".
func peerName(k keyRef, s string) *Error {
	if s == "" || len(s) > maxHAProxyName {
		return bad(k, quote(s), fmt.Sprintf("must be 1 to %d bytes long", maxHAProxyName))
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(".-_:", r)) {
			return bad(k, quote(s), `must hold only letters, digits and ".-_:" (HAProxy's names)`)
		}
	}
	return nil
}
