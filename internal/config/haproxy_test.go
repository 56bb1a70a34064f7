package config

import (
	"strings"
	"testing"
	"time"
)

func TestValidateHAProxy(t *testing.T) {
	on := func(c *Config) { c.HAProxy.Listen, c.HAProxy.Tables = "127.0.0.1:7076", []string{"web"} }
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string // "" if valid, else the whole error text
	}{
		{"off", func(c *Config) {}, ""},
		{"on", on, ""},
		{"a peers section's table", func(c *Config) { on(c); c.HAProxy.Tables = []string{"/web", "api"} }, ""},
		{"no table", func(c *Config) { on(c); c.HAProxy.Tables = nil },
			"config: haproxy.tables = []: must name at least one table when haproxy.listen is set"},
		{"a table twice", func(c *Config) { on(c); c.HAProxy.Tables = []string{"web", "web"} },
			`config: haproxy.tables = "web": must name each table once`},
		{"a bad table name", func(c *Config) { on(c); c.HAProxy.Tables = []string{"we b"} },
			`config: haproxy.tables = "we b": must hold only letters, digits and ".-_:" (HAProxy's names)`},
		{"no port", func(c *Config) { on(c); c.HAProxy.Listen = "127.0.0.1" },
			`config: haproxy.listen = "127.0.0.1": must be "host:port" (missing port in address)`},
		{"the spoe address", func(c *Config) { on(c); c.SPOE.Listen = "127.0.0.1:7076" },
			`config: haproxy.listen = "127.0.0.1:7076": must be another address than spoe.listen`},
		{"empty name", func(c *Config) { c.HAProxy.Name = "" }, `config: haproxy.name = "": must be 1 to 64 bytes long`},
		{"long name", func(c *Config) { c.HAProxy.Name = strings.Repeat("a", 65) },
			`config: haproxy.name = "` + strings.Repeat("a", 65) + `": must be 1 to 64 bytes long`},
		{"a bad peer", func(c *Config) { c.HAProxy.Peers = []string{"lb/1"} },
			`config: haproxy.peers = "lb/1": must hold only letters, digits and ".-_:" (HAProxy's names)`},
		{"counter", func(c *Config) { c.HAProxy.Counter = "http_req_cnt" }, ""},
		{"bad counter", func(c *Config) { c.HAProxy.Counter = "gpt0" },
			`config: haproxy.counter = "gpt0": must be one of "gpc0", "gpc1", "gpc", "http_req_cnt"`},
		{"prefix newline", func(c *Config) { c.HAProxy.Prefix = "a\nb" }, `config: haproxy.prefix = "a\nb": must not contain a newline or NUL`},
		{"max_keys 0", func(c *Config) { c.HAProxy.MaxKeys = 0 }, "config: haproxy.max_keys = 0: must be between 1 and 100000000"},
		{"max_conns 1001", func(c *Config) { c.HAProxy.MaxConns = 1001 }, "config: haproxy.max_conns = 1001: must be between 1 and 1000"},
		{"check_interval 0", func(c *Config) { c.HAProxy.CheckInterval = Duration{0} },
			`config: haproxy.check_interval = "0s": must be between 1ms and 10s`},
		{"check_interval 1ms", func(c *Config) { c.HAProxy.CheckInterval = Duration{time.Millisecond} }, ""},
	} {
		c := Default()
		tc.set(&c)
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: Validate() = %v, want nil", tc.name, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("%s: Validate() = %v, want %s", tc.name, err, tc.want)
		}
	}
}
