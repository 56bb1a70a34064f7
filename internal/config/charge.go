package config

import (
	"fmt"
	"strings"
)

// validateCharge checks the charge socket's keys, listen.charge_unix and
// listen.charge_tcp: each a socket of its own, never one that another
// way in listens on. Its rules are in rules.go.
func (c *Config) validateCharge() *Error {
	l := &c.Listen
	if p := l.ChargeUnix; p != "" {
		k := key("listen", "charge_unix")
		switch {
		case strings.IndexByte(p, 0) >= 0:
			return bad(k, quote(p), "must not contain a NUL byte")
		case len(p) > maxUnixPath:
			return bad(k, quote(p), fmt.Sprintf("must be at most %d bytes long (the kernel's limit for a socket path)", maxUnixPath))
		}
	}
	if a := l.ChargeTCP; a != "" {
		k := key("listen", "charge_tcp")
		if e := checkAddr(k, a, false, 0); e != nil {
			return e
		}
		if !strings.HasSuffix(a, ":0") {
			for _, other := range []struct{ name, addr string }{{"listen.tcp", l.TCP}, {"admin.http", c.Admin.HTTP}, {"http.listen", c.HTTP.Listen}, {"spoe.listen", c.SPOE.Listen}} {
				if a == other.addr {
					return bad(k, quote(a), "must be another address than "+other.name)
				}
			}
		}
	}
	return nil
}
