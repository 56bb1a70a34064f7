package config

import (
	"fmt"
	"strconv"
	"strings"
)

// Allowed values of the [http] section, used by its rules in rules.go.
// dthrottle.toml documents each one beside its key.
const maxHTTPConns = 100000

// validateHTTP checks the HTTP decision endpoint's keys.
func (c *Config) validateHTTP() *Error {
	h := &c.HTTP
	if path, ok := strings.CutPrefix(h.Listen, HTTPUnixPrefix); ok {
		switch {
		case path == "":
			return bad(key("http", "listen"), quote(h.Listen), `must be "host:port" or "unix:/path" with a path`)
		case strings.IndexByte(path, 0) >= 0:
			return bad(key("http", "listen"), quote(h.Listen), "must not contain a NUL byte")
		case len(path) > maxUnixPath:
			return bad(key("http", "listen"), quote(h.Listen), fmt.Sprintf("socket path must be at most %d bytes long (the kernel's limit)", maxUnixPath))
		}
	} else if h.Listen != "" {
		if e := checkAddr(key("http", "listen"), h.Listen, false, 0); e != nil {
			return e
		}
		if h.Listen == c.Admin.HTTP && !strings.HasSuffix(h.Listen, ":0") {
			return bad(key("http", "listen"), quote(h.Listen), "must be another address than admin.http (the admin endpoint is never for request traffic)")
		}
	}
	if e := intRange(key("http", "max_conns"), h.MaxConns); e != nil {
		return e
	}
	return oneOf(key("http", "refuse_status"), strconv.Itoa(h.RefuseStatus), strconv.Itoa(h.RefuseStatus))
}

// Network splits HTTP.Listen into a network and an address for
// net.Listen: "unix" and the path, or "tcp" and "host:port".
func (h HTTP) Network() (network, address string) {
	if path, ok := strings.CutPrefix(h.Listen, HTTPUnixPrefix); ok {
		return "unix", path
	}
	return "tcp", h.Listen
}
