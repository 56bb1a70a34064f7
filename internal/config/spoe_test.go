package config

import (
	"strings"
	"testing"
)

func TestValidateSPOE(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string // "" if valid, else the whole error text
	}{
		{"off", func(c *Config) { c.SPOE.Listen = "" }, ""},
		{"tcp loopback", func(c *Config) { c.SPOE.Listen = "127.0.0.1:7074" }, ""},
		{"tcp no port", func(c *Config) { c.SPOE.Listen = "127.0.0.1" }, `config: spoe.listen = "127.0.0.1": must be "host:port" (missing port in address)`},
		{"unix", func(c *Config) { c.SPOE.Listen = "unix:/run/dthrottle/spoe.sock" }, ""},
		{"unix empty", func(c *Config) { c.SPOE.Listen = "unix:" }, `config: spoe.listen = "unix:": must be "host:port" or "unix:/path" with a path`},
		{"unix NUL", func(c *Config) { c.SPOE.Listen = "unix:/a\x00b" }, `config: spoe.listen = "unix:/a\x00b": must not contain a NUL byte`},
		{"unix 108 bytes", func(c *Config) { c.SPOE.Listen = "unix:/" + strings.Repeat("a", 107) },
			`config: spoe.listen = "unix:/` + strings.Repeat("a", 107) + `": socket path must be at most 107 bytes long (the kernel's limit)`},
		{"unix is the query socket", func(c *Config) { c.Listen.Unix = "/tmp/q.sock"; c.SPOE.Listen = "unix:/tmp/q.sock" },
			`config: spoe.listen = "unix:/tmp/q.sock": must be another socket than listen.unix`},
		{"unix is the http socket", func(c *Config) { c.HTTP.Listen = "unix:/tmp/h.sock"; c.SPOE.Listen = "unix:/tmp/h.sock" },
			`config: spoe.listen = "unix:/tmp/h.sock": must be another socket than http.listen`},
		{"the admin address", func(c *Config) { c.Admin.HTTP = "127.0.0.1:7071"; c.SPOE.Listen = "127.0.0.1:7071" },
			`config: spoe.listen = "127.0.0.1:7071": must be another address than admin.http`},
		{"the http address", func(c *Config) { c.HTTP.Listen = "127.0.0.1:7072"; c.SPOE.Listen = "127.0.0.1:7072" },
			`config: spoe.listen = "127.0.0.1:7072": must be another address than http.listen`},
		{"the tcp address", func(c *Config) { c.Listen.TCP = "127.0.0.1:7070"; c.SPOE.Listen = "127.0.0.1:7070" },
			`config: spoe.listen = "127.0.0.1:7070": must be another address than listen.tcp`},
		{"all port 0", func(c *Config) { c.HTTP.Listen = "127.0.0.1:0"; c.SPOE.Listen = "127.0.0.1:0" }, ""},
		{"max_conns 1", func(c *Config) { c.SPOE.MaxConns = 1 }, ""},
		{"max_conns 0", func(c *Config) { c.SPOE.MaxConns = 0 }, "config: spoe.max_conns = 0: must be between 1 and 100000"},
		{"max_conns 100001", func(c *Config) { c.SPOE.MaxConns = 100001 }, "config: spoe.max_conns = 100001: must be between 1 and 100000"},
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

func TestParseSPOE(t *testing.T) {
	c, err := Parse([]byte("[spoe]\nlisten = \"unix:/tmp/s.sock\"\nmax_conns = 7\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.SPOE != (SPOE{Listen: "unix:/tmp/s.sock", MaxConns: 7}) {
		t.Errorf("SPOE = %+v", c.SPOE)
	}
	if n, a := c.SPOE.Network(); n != "unix" || a != "/tmp/s.sock" {
		t.Errorf("Network() = %q, %q", n, a)
	}
	if _, err := Parse([]byte("[spoe]\nmax_con = 7\n")); err == nil || !strings.Contains(err.Error(), `unknown key "spoe.max_con"`) {
		t.Errorf("unknown key: %v", err)
	}
}
