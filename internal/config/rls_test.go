package config

import (
	"strings"
	"testing"
)

func TestValidateRLS(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string // "" if valid, else the whole error text
	}{
		{"off", func(c *Config) { c.RLS.Listen = "" }, ""},
		{"tcp loopback", func(c *Config) { c.RLS.Listen = "127.0.0.1:7075" }, ""},
		{"tcp no port", func(c *Config) { c.RLS.Listen = "127.0.0.1" }, `config: rls.listen = "127.0.0.1": must be "host:port" (missing port in address)`},
		{"unix", func(c *Config) { c.RLS.Listen = "unix:/run/dthrottle/rls.sock" }, ""},
		{"unix empty", func(c *Config) { c.RLS.Listen = "unix:" }, `config: rls.listen = "unix:": must be "host:port" or "unix:/path" with a path`},
		{"unix NUL", func(c *Config) { c.RLS.Listen = "unix:/a\x00b" }, `config: rls.listen = "unix:/a\x00b": must not contain a NUL byte`},
		{"unix 108 bytes", func(c *Config) { c.RLS.Listen = "unix:/" + strings.Repeat("a", 107) },
			`config: rls.listen = "unix:/` + strings.Repeat("a", 107) + `": socket path must be at most 107 bytes long (the kernel's limit)`},
		{"unix is the query socket", func(c *Config) { c.Listen.Unix = "/tmp/q.sock"; c.RLS.Listen = "unix:/tmp/q.sock" },
			`config: rls.listen = "unix:/tmp/q.sock": must be another socket than listen.unix`},
		{"unix is the charge socket", func(c *Config) { c.Listen.ChargeUnix = "/tmp/c.sock"; c.RLS.Listen = "unix:/tmp/c.sock" },
			`config: rls.listen = "unix:/tmp/c.sock": must be another socket than listen.charge_unix`},
		{"unix is the http socket", func(c *Config) { c.HTTP.Listen = "unix:/tmp/h.sock"; c.RLS.Listen = "unix:/tmp/h.sock" },
			`config: rls.listen = "unix:/tmp/h.sock": must be another socket than http.listen`},
		{"unix is the spoe socket", func(c *Config) { c.SPOE.Listen = "unix:/tmp/s.sock"; c.RLS.Listen = "unix:/tmp/s.sock" },
			`config: rls.listen = "unix:/tmp/s.sock": must be another socket than spoe.listen`},
		{"the tcp address", func(c *Config) { c.Listen.TCP = "127.0.0.1:7070"; c.RLS.Listen = "127.0.0.1:7070" },
			`config: rls.listen = "127.0.0.1:7070": must be another address than listen.tcp`},
		{"the charge address", func(c *Config) { c.Listen.ChargeTCP = "127.0.0.1:7073"; c.RLS.Listen = "127.0.0.1:7073" },
			`config: rls.listen = "127.0.0.1:7073": must be another address than listen.charge_tcp`},
		{"the admin address", func(c *Config) { c.Admin.HTTP = "127.0.0.1:7071"; c.RLS.Listen = "127.0.0.1:7071" },
			`config: rls.listen = "127.0.0.1:7071": must be another address than admin.http`},
		{"the http address", func(c *Config) { c.HTTP.Listen = "127.0.0.1:7072"; c.RLS.Listen = "127.0.0.1:7072" },
			`config: rls.listen = "127.0.0.1:7072": must be another address than http.listen`},
		{"the spoe address", func(c *Config) { c.SPOE.Listen = "127.0.0.1:7074"; c.RLS.Listen = "127.0.0.1:7074" },
			`config: rls.listen = "127.0.0.1:7074": must be another address than spoe.listen`},
		{"all port 0", func(c *Config) { c.HTTP.Listen = "127.0.0.1:0"; c.RLS.Listen = "127.0.0.1:0" }, ""},
		{"max_conns 1", func(c *Config) { c.RLS.MaxConns = 1 }, ""},
		{"max_conns 0", func(c *Config) { c.RLS.MaxConns = 0 }, "config: rls.max_conns = 0: must be between 1 and 100000"},
		{"max_conns 100001", func(c *Config) { c.RLS.MaxConns = 100001 }, "config: rls.max_conns = 100001: must be between 1 and 100000"},
		{"max_requests 1", func(c *Config) { c.RLS.MaxRequests = 1 }, ""},
		{"max_requests 0", func(c *Config) { c.RLS.MaxRequests = 0 }, "config: rls.max_requests = 0: must be between 1 and 100000"},
		{"max_requests 100001", func(c *Config) { c.RLS.MaxRequests = 100001 }, "config: rls.max_requests = 100001: must be between 1 and 100000"},
		{"unmatched ok", func(c *Config) { c.RLS.Unmatched = "ok" }, ""},
		{"unmatched OK", func(c *Config) { c.RLS.Unmatched = "OK" }, `config: rls.unmatched = "OK": must be "limit" or "ok"`},
		{"unmatched empty", func(c *Config) { c.RLS.Unmatched = "" }, `config: rls.unmatched = "": must be "limit" or "ok"`},
		{"no charge key", func(c *Config) { c.RLS.ChargeKey = "" }, ""},
		{"charge key 1024 bytes", func(c *Config) { c.RLS.ChargeKey = strings.Repeat("k", 1024) }, ""},
		{"charge key 1025 bytes", func(c *Config) { c.RLS.ChargeKey = strings.Repeat("k", 1025) },
			`config: rls.charge_key = "` + strings.Repeat("k", 1025) + `": must be at most 1024 bytes long`},
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

func TestParseRLS(t *testing.T) {
	c, err := Parse([]byte("[rls]\nlisten = \"unix:/tmp/r.sock\"\nmax_conns = 7\nmax_requests = 9\nunmatched = \"ok\"\ncharge_key = \"cost\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.RLS != (RLS{Listen: "unix:/tmp/r.sock", MaxConns: 7, MaxRequests: 9, Unmatched: "ok", ChargeKey: "cost"}) {
		t.Errorf("RLS = %+v", c.RLS)
	}
	if n, a := c.RLS.Network(); n != "unix" || a != "/tmp/r.sock" {
		t.Errorf("Network() = %q, %q", n, a)
	}
	if n, a := (RLS{Listen: "127.0.0.1:7075"}).Network(); n != "tcp" || a != "127.0.0.1:7075" {
		t.Errorf("Network() = %q, %q", n, a)
	}
	if _, err := Parse([]byte("[rls]\nunmached = \"ok\"\n")); err == nil || !strings.Contains(err.Error(), `unknown key "rls.unmached"`) {
		t.Errorf("a misspelt key: %v", err)
	}
}

// The default charge key is one the service accepts.
func TestRLSDefaultChargeKeyFits(t *testing.T) {
	if d := Default().RLS; d.ChargeKey == "" || len(d.ChargeKey) > maxRLSChargeKey {
		t.Errorf("default charge key %q: want 1 to %d bytes", d.ChargeKey, maxRLSChargeKey)
	}
}

// A reload changes unmatched and charge_key live; listen, max_conns and
// max_requests need a restart.
func TestRLSRestartKeys(t *testing.T) {
	cur := Default()
	next := cur
	next.RLS.Unmatched, next.RLS.ChargeKey = "ok", "cost"
	if keys := RestartKeys(cur, next); keys != nil {
		t.Errorf("unmatched and charge_key need a restart: %v", keys)
	}
	next.RLS.Listen, next.RLS.MaxConns, next.RLS.MaxRequests = "127.0.0.1:7075", 5, 6
	if keys := RestartKeys(cur, next); strings.Join(keys, " ") != "rls.listen rls.max_conns rls.max_requests" {
		t.Errorf("RestartKeys = %v, want rls.listen, rls.max_conns and rls.max_requests", keys)
	}
}
