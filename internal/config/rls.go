package config

import (
	"fmt"
	"strings"

	"github.com/dthrottle/dthrottle/internal/limits"
)

// RLS configures the rate limit service for Envoy
// (envoy.service.ratelimit.v3.RateLimitService, package rls), a gRPC
// listener of its own that Envoy's rate limit filters ask. The zero RLS
// is not valid (MaxConns is 0): start from [Default].
type RLS struct {
	Listen      string `toml:"listen" reload:"restart"`       // "host:port" or "unix:/path", e.g. "127.0.0.1:7075"; "" disables
	MaxConns    int    `toml:"max_conns" reload:"restart"`    // most connections open at once; one more is closed at once
	MaxRequests int    `toml:"max_requests" reload:"restart"` // most requests in progress at once, on all connections together, from their headers until their answer is written; one more is answered RESOURCE_EXHAUSTED at once
	Unmatched   string `toml:"unmatched"`                     // a descriptor no prefix policy matches: "limit" (under [limit], as every tag) or "ok" (answered OK with no limit, nothing kept)
	ChargeKey   string `toml:"charge_key"`                    // the entry key that makes a descriptor a charge of its hits_addend, after the response; "" makes none
}

// The values of RLS.Unmatched.
const (
	UnmatchedLimit = "limit"
	UnmatchedOK    = "ok"
)

// Allowed values of the [rls] section, used by its rules in rules.go.
// dthrottle.toml documents each one beside its key.
const (
	maxRLSConns     = 100000
	maxRLSRequests  = 100000
	maxRLSChargeKey = limits.MaxRLSString // the longest entry key the service accepts
)

// validateRLS checks the rate limit service's keys: its listener is a
// socket or an address of its own, never one another way in listens on.
func (c *Config) validateRLS() *Error {
	r := &c.RLS
	k := key("rls", "listen")
	if path, ok := strings.CutPrefix(r.Listen, HTTPUnixPrefix); ok {
		switch {
		case path == "":
			return bad(k, quote(r.Listen), `must be "host:port" or "unix:/path" with a path`)
		case strings.IndexByte(path, 0) >= 0:
			return bad(k, quote(r.Listen), "must not contain a NUL byte")
		case len(path) > maxUnixPath:
			return bad(k, quote(r.Listen), fmt.Sprintf("socket path must be at most %d bytes long (the kernel's limit)", maxUnixPath))
		}
	} else if r.Listen != "" {
		if e := checkAddr(k, r.Listen, false, 0); e != nil {
			return e
		}
		if !strings.HasSuffix(r.Listen, ":0") {
			for _, other := range []struct{ name, addr string }{{"listen.tcp", c.Listen.TCP}, {"listen.charge_tcp", c.Listen.ChargeTCP},
				{"admin.http", c.Admin.HTTP}, {"http.listen", c.HTTP.Listen}, {"spoe.listen", c.SPOE.Listen}} {
				if r.Listen == other.addr {
					return bad(k, quote(r.Listen), "must be another address than "+other.name)
				}
			}
		}
	}
	if e := intRange(key("rls", "max_conns"), r.MaxConns); e != nil {
		return e
	}
	if e := intRange(key("rls", "max_requests"), r.MaxRequests); e != nil {
		return e
	}
	if e := oneOf(key("rls", "unmatched"), r.Unmatched, quote(r.Unmatched)); e != nil {
		return e
	}
	if len(r.ChargeKey) > maxRLSChargeKey {
		return bad(key("rls", "charge_key"), quote(r.ChargeKey), fmt.Sprintf("must be at most %d bytes long", maxRLSChargeKey))
	}
	return nil
}

// Network splits RLS.Listen into a network and an address for
// net.Listen: "unix" and the path, or "tcp" and "host:port".
func (r RLS) Network() (network, address string) {
	return HTTP{Listen: r.Listen}.Network()
}
