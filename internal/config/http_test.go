package config

import (
	"strings"
	"testing"
)

func TestValidateHTTP(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string // "" if valid, else the whole error text
	}{
		{"off", func(c *Config) { c.HTTP.Listen = "" }, ""},
		{"tcp loopback", func(c *Config) { c.HTTP.Listen = "127.0.0.1:7072" }, ""},
		{"tcp port 0", func(c *Config) { c.HTTP.Listen = "127.0.0.1:0" }, ""},
		{"tcp no port", func(c *Config) { c.HTTP.Listen = "127.0.0.1" }, `config: http.listen = "127.0.0.1": must be "host:port" (missing port in address)`},
		{"unix", func(c *Config) { c.HTTP.Listen = "unix:/run/dthrottle/http.sock" }, ""},
		{"unix empty", func(c *Config) { c.HTTP.Listen = "unix:" }, `config: http.listen = "unix:": must be "host:port" or "unix:/path" with a path`},
		{"unix NUL", func(c *Config) { c.HTTP.Listen = "unix:/a\x00b" }, `config: http.listen = "unix:/a\x00b": must not contain a NUL byte`},
		{"unix 108 bytes", func(c *Config) { c.HTTP.Listen = "unix:/" + strings.Repeat("a", 107) },
			`config: http.listen = "unix:/` + strings.Repeat("a", 107) + `": socket path must be at most 107 bytes long (the kernel's limit)`},
		{"unix is the query socket", func(c *Config) { c.Listen.Unix = "/tmp/q.sock"; c.HTTP.Listen = "unix:/tmp/q.sock" },
			`config: http.listen = "unix:/tmp/q.sock": must be another socket than listen.unix`},
		{"the admin address", func(c *Config) { c.Admin.HTTP = "127.0.0.1:7071"; c.HTTP.Listen = "127.0.0.1:7071" },
			`config: http.listen = "127.0.0.1:7071": must be another address than admin.http (the admin endpoint is never for request traffic)`},
		{"both port 0", func(c *Config) { c.Admin.HTTP = "127.0.0.1:0"; c.HTTP.Listen = "127.0.0.1:0" }, ""},
		{"max_conns 1", func(c *Config) { c.HTTP.MaxConns = 1 }, ""},
		{"max_conns 0", func(c *Config) { c.HTTP.MaxConns = 0 }, "config: http.max_conns = 0: must be between 1 and 100000"},
		{"max_conns 100001", func(c *Config) { c.HTTP.MaxConns = 100001 }, "config: http.max_conns = 100001: must be between 1 and 100000"},
		{"refuse 429", func(c *Config) { c.HTTP.RefuseStatus = 429 }, ""},
		{"refuse 503", func(c *Config) { c.HTTP.RefuseStatus = 503 }, "config: http.refuse_status = 503: must be 403 (for nginx auth_request) or 429"},
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

func TestParseHTTPAndDryRun(t *testing.T) {
	c, err := Parse([]byte(`
[limit]
dry_run = true
[[policy]]
prefix = "a:"
rate = 1.0
burst = 2
dry_run = true
[http]
listen = "unix:/tmp/x.sock"
max_conns = 7
refuse_status = 429
`))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Limit.DryRun || !c.Policy[0].DryRun || c.HTTP != (HTTP{Listen: "unix:/tmp/x.sock", MaxConns: 7, RefuseStatus: 429}) {
		t.Errorf("parsed %+v %+v %+v", c.Limit, c.Policy, c.HTTP)
	}
	if n, a := c.HTTP.Network(); n != "unix" || a != "/tmp/x.sock" {
		t.Errorf("Network() = %q %q", n, a)
	}
	c.HTTP.Listen = "127.0.0.1:7072"
	if n, a := c.HTTP.Network(); n != "tcp" || a != "127.0.0.1:7072" {
		t.Errorf("Network() = %q %q", n, a)
	}
	for src, want := range map[string]string{
		"[limit]\ndry_run = 1\n":        "limit.dry_run: must be true or false, not an integer",
		"[http]\nrefuse_status = 500\n": "http.refuse_status = 500",
		"[http]\nmax_con = 5\n":         `unknown key "http.max_con" (did you mean "http.max_conns"?)`,
	} {
		if _, err := Parse([]byte(src)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", src, err, want)
		}
	}
}
