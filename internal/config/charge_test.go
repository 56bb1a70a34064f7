package config

import (
	"slices"
	"strings"
	"testing"
)

func TestValidateCharge(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string // "" if valid, else the whole error text
	}{
		{"off", func(c *Config) {}, ""},
		{"unix", func(c *Config) { c.Listen.ChargeUnix = "/run/dthrottle/charge.sock" }, ""},
		{"unix NUL", func(c *Config) { c.Listen.ChargeUnix = "/a\x00b" }, `config: listen.charge_unix = "/a\x00b": must not contain a NUL byte`},
		{"unix 108 bytes", func(c *Config) { c.Listen.ChargeUnix = "/" + strings.Repeat("a", 107) },
			`config: listen.charge_unix = "/` + strings.Repeat("a", 107) + `": must be at most 107 bytes long (the kernel's limit for a socket path)`},
		{"unix is the query socket", func(c *Config) { c.Listen.Unix = "/tmp/q.sock"; c.Listen.ChargeUnix = "/tmp/q.sock" },
			`config: listen.charge_unix = "/tmp/q.sock": must be another socket than listen.unix`},
		{"unix is the http socket", func(c *Config) { c.HTTP.Listen = "unix:/tmp/h.sock"; c.Listen.ChargeUnix = "/tmp/h.sock" },
			`config: listen.charge_unix = "/tmp/h.sock": must be another socket than http.listen`},
		{"unix is the spoe socket", func(c *Config) { c.SPOE.Listen = "unix:/tmp/s.sock"; c.Listen.ChargeUnix = "/tmp/s.sock" },
			`config: listen.charge_unix = "/tmp/s.sock": must be another socket than spoe.listen`},
		{"only the charge socket", func(c *Config) { c.Listen.Unix = ""; c.Listen.ChargeUnix = "/tmp/c.sock" },
			"config: listen.unix and listen.tcp are both empty: at least one listener is required"},
		{"tcp", func(c *Config) { c.Listen.ChargeTCP = "127.0.0.1:7073" }, ""},
		{"tcp and unix", func(c *Config) { c.Listen.ChargeTCP = ":7073"; c.Listen.ChargeUnix = "/tmp/c.sock" }, ""},
		{"tcp no port", func(c *Config) { c.Listen.ChargeTCP = "127.0.0.1" },
			`config: listen.charge_tcp = "127.0.0.1": must be "host:port" (missing port in address)`},
		{"tcp bad port", func(c *Config) { c.Listen.ChargeTCP = "127.0.0.1:70000" },
			`config: listen.charge_tcp = "127.0.0.1:70000": port must be a number from 0 to 65535`},
		{"the query address", func(c *Config) { c.Listen.TCP = "127.0.0.1:7070"; c.Listen.ChargeTCP = "127.0.0.1:7070" },
			`config: listen.charge_tcp = "127.0.0.1:7070": must be another address than listen.tcp`},
		{"the admin address", func(c *Config) { c.Admin.HTTP = "127.0.0.1:7071"; c.Listen.ChargeTCP = "127.0.0.1:7071" },
			`config: listen.charge_tcp = "127.0.0.1:7071": must be another address than admin.http`},
		{"the http address", func(c *Config) { c.HTTP.Listen = "127.0.0.1:7072"; c.Listen.ChargeTCP = "127.0.0.1:7072" },
			`config: listen.charge_tcp = "127.0.0.1:7072": must be another address than http.listen`},
		{"the spoe address", func(c *Config) { c.SPOE.Listen = "127.0.0.1:7074"; c.Listen.ChargeTCP = "127.0.0.1:7074" },
			`config: listen.charge_tcp = "127.0.0.1:7074": must be another address than spoe.listen`},
		{"all port 0", func(c *Config) { c.Listen.TCP = "127.0.0.1:0"; c.Listen.ChargeTCP = "127.0.0.1:0" }, ""},
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

func TestParseCharge(t *testing.T) {
	c, err := Parse([]byte("[listen]\ncharge_unix = \"/tmp/c.sock\"\ncharge_tcp = \"127.0.0.1:7073\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen.ChargeUnix != "/tmp/c.sock" || c.Listen.ChargeTCP != "127.0.0.1:7073" {
		t.Errorf("Listen = %+v", c.Listen)
	}
	// Opening or moving the charge socket needs a restart.
	next := c
	next.Listen.ChargeUnix, next.Listen.ChargeTCP = "", "127.0.0.1:7075"
	if got, want := RestartKeys(c, next), []string{"listen.charge_unix", "listen.charge_tcp"}; !slices.Equal(got, want) {
		t.Errorf("RestartKeys = %v, want %v", got, want)
	}
	if _, err := Parse([]byte("[listen]\ncharge = \"/tmp/c.sock\"\n")); err == nil || !strings.Contains(err.Error(), `unknown key "listen.charge"`) {
		t.Errorf("unknown key: %v", err)
	}
}
