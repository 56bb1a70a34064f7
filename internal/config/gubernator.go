package config

import "strings"

// Gubernator configures Gubernator's API (package gubernator): its gRPC
// service pb.gubernator.V1 and the HTTP gateway to it, each on a listener
// of its own, for clients written for Gubernator. Either may be off. The
// zero Gubernator is not valid (MaxConns is 0): start from [Default].
type Gubernator struct {
	GRPC        string `toml:"grpc" reload:"restart"`         // "host:port" of the gRPC service, e.g. "127.0.0.1:1051"; "" disables
	HTTP        string `toml:"http" reload:"restart"`         // "host:port" of the HTTP gateway (POST /v1/GetRateLimits, GET /v1/HealthCheck), e.g. "127.0.0.1:1050"; "" disables
	MaxConns    int    `toml:"max_conns" reload:"restart"`    // most connections open at once, on both listeners together; one more is closed at once
	MaxRequests int    `toml:"max_requests" reload:"restart"` // most gRPC requests in progress at once, on all connections together, from their headers until their answer is written; one more is answered RESOURCE_EXHAUSTED at once
}

// Allowed values of the [gubernator] section, used by its rules in
// rules.go. dthrottle.toml documents each one beside its key.
const (
	maxGubernatorConns    = 100000
	maxGubernatorRequests = 100000
)

// validateGubernator checks the Gubernator API's keys: each listener is
// an address of its own, never one another way in listens on.
func (c *Config) validateGubernator() *Error {
	g := &c.Gubernator
	others := []struct{ name, addr string }{{"listen.tcp", c.Listen.TCP}, {"listen.charge_tcp", c.Listen.ChargeTCP},
		{"admin.http", c.Admin.HTTP}, {"http.listen", c.HTTP.Listen}, {"spoe.listen", c.SPOE.Listen}, {"rls.listen", c.RLS.Listen}}
	for _, l := range []struct {
		k    keyRef
		addr string
	}{{key("gubernator", "grpc"), g.GRPC}, {key("gubernator", "http"), g.HTTP}} {
		if l.addr == "" {
			continue
		}
		if e := checkAddr(l.k, l.addr, false, 0); e != nil {
			return e
		}
		if strings.HasSuffix(l.addr, ":0") {
			continue
		}
		for _, o := range others {
			if l.addr == o.addr {
				return bad(l.k, quote(l.addr), "must be another address than "+o.name)
			}
		}
		others = append(others, struct{ name, addr string }{"gubernator.grpc", l.addr})
	}
	if e := intRange(key("gubernator", "max_conns"), g.MaxConns); e != nil {
		return e
	}
	return intRange(key("gubernator", "max_requests"), g.MaxRequests)
}
