package config

import (
	"fmt"
	"strings"
)

// SPOE configures the agent for HAProxy's Stream Processing Offload
// Engine (package spoe), a listener of its own that HAProxy's "filter
// spoe" connects to. The zero SPOE is not valid (MaxConns is 0): start
// from [Default].
type SPOE struct {
	Listen   string `toml:"listen" reload:"restart"`    // "host:port" or "unix:/path", e.g. "127.0.0.1:7074"; "" disables
	MaxConns int    `toml:"max_conns" reload:"restart"` // most connections open at once; one more gets an AGENT-DISCONNECT
}

// Allowed values of the [spoe] section, used by its rules in rules.go.
// dthrottle.toml documents each one beside its key.
const maxSPOEConns = 100000

// validateSPOE checks the SPOE agent's keys.
func (c *Config) validateSPOE() *Error {
	s := &c.SPOE
	k := key("spoe", "listen")
	if path, ok := strings.CutPrefix(s.Listen, HTTPUnixPrefix); ok {
		switch {
		case path == "":
			return bad(k, quote(s.Listen), `must be "host:port" or "unix:/path" with a path`)
		case strings.IndexByte(path, 0) >= 0:
			return bad(k, quote(s.Listen), "must not contain a NUL byte")
		case len(path) > maxUnixPath:
			return bad(k, quote(s.Listen), fmt.Sprintf("socket path must be at most %d bytes long (the kernel's limit)", maxUnixPath))
		}
	} else if s.Listen != "" {
		if e := checkAddr(k, s.Listen, false, 0); e != nil {
			return e
		}
		if !strings.HasSuffix(s.Listen, ":0") {
			for _, other := range []struct{ name, addr string }{{"admin.http", c.Admin.HTTP}, {"http.listen", c.HTTP.Listen}, {"listen.tcp", c.Listen.TCP}} {
				if s.Listen == other.addr {
					return bad(k, quote(s.Listen), "must be another address than "+other.name)
				}
			}
		}
	}
	return intRange(key("spoe", "max_conns"), s.MaxConns)
}

// Network splits SPOE.Listen into a network and an address for
// net.Listen: "unix" and the path, or "tcp" and "host:port".
func (s SPOE) Network() (network, address string) {
	return HTTP{Listen: s.Listen}.Network()
}
