package caddydthrottle

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// parseCaddyfile makes a Handler of a dthrottle directive.
func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var m Handler
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return &m, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	dthrottle [<matcher>] <tag> {
//		socket  <path>           # default /run/dthrottle/dthrottle.sock
//		fail    open|closed      # default open
//		status  <code>           # default 429
//		timeout <duration>       # default 5ms, for a query asked over the socket
//	}
//
// The block is optional; each subdirective may appear once.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive's name
	if !d.NextArg() {
		return d.Err("a tag is required, such as {remote_host}")
	}
	h.Tag = d.Val()
	if h.Tag == "" {
		return d.Err("the tag is empty")
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := map[string]bool{}
	for d.NextBlock(0) {
		name := d.Val()
		if seen[name] {
			return d.Errf("%s given twice", name)
		}
		seen[name] = true
		var arg string
		switch name {
		case "socket", "fail", "status", "timeout":
			if !d.AllArgs(&arg) {
				return d.ArgErr()
			}
		default:
			return d.Errf("unknown subdirective %q (want socket, fail, status or timeout)", name)
		}
		switch name {
		case "socket":
			h.Socket = arg
		case "fail":
			if arg != "open" && arg != "closed" {
				return d.Errf("fail %q: must be open or closed", arg)
			}
			h.Fail = arg
		case "status":
			n, err := strconv.Atoi(arg)
			if err != nil || n < 400 || n > 599 {
				return d.Errf("status %q: must be a code from 400 to 599", arg)
			}
			h.Status = n
		case "timeout":
			t, err := caddy.ParseDuration(arg)
			if err != nil || t <= 0 {
				return d.Errf("timeout %q: must be a duration above 0, such as 5ms", arg)
			}
			h.Timeout = caddy.Duration(t)
		}
	}
	return nil
}

// Interface guard.
var _ caddyfile.Unmarshaler = (*Handler)(nil)
