package config

import "testing"

func TestValidateGubernator(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string // "" if valid, else the whole error text
	}{
		{"off", func(c *Config) {}, ""},
		{"both", func(c *Config) { c.Gubernator.GRPC, c.Gubernator.HTTP = "127.0.0.1:1051", "127.0.0.1:1050" }, ""},
		{"grpc only", func(c *Config) { c.Gubernator.GRPC = "127.0.0.1:1051" }, ""},
		{"http only", func(c *Config) { c.Gubernator.HTTP = "127.0.0.1:1050" }, ""},
		{"grpc no port", func(c *Config) { c.Gubernator.GRPC = "127.0.0.1" },
			`config: gubernator.grpc = "127.0.0.1": must be "host:port" (missing port in address)`},
		{"http no port", func(c *Config) { c.Gubernator.HTTP = "localhost" },
			`config: gubernator.http = "localhost": must be "host:port" (missing port in address)`},
		{"one address for both", func(c *Config) { c.Gubernator.GRPC, c.Gubernator.HTTP = "127.0.0.1:1051", "127.0.0.1:1051" },
			`config: gubernator.http = "127.0.0.1:1051": must be another address than gubernator.grpc`},
		{"the tcp address", func(c *Config) { c.Listen.TCP = "127.0.0.1:7070"; c.Gubernator.GRPC = "127.0.0.1:7070" },
			`config: gubernator.grpc = "127.0.0.1:7070": must be another address than listen.tcp`},
		{"the admin address", func(c *Config) { c.Admin.HTTP = "127.0.0.1:7071"; c.Gubernator.HTTP = "127.0.0.1:7071" },
			`config: gubernator.http = "127.0.0.1:7071": must be another address than admin.http`},
		{"the rls address", func(c *Config) { c.RLS.Listen = "127.0.0.1:7075"; c.Gubernator.GRPC = "127.0.0.1:7075" },
			`config: gubernator.grpc = "127.0.0.1:7075": must be another address than rls.listen`},
		{"all port 0", func(c *Config) {
			c.Gubernator.GRPC, c.Gubernator.HTTP, c.Admin.HTTP = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
		}, ""},
		{"max_conns 1", func(c *Config) { c.Gubernator.MaxConns = 1 }, ""},
		{"max_conns 0", func(c *Config) { c.Gubernator.MaxConns = 0 }, "config: gubernator.max_conns = 0: must be between 1 and 100000"},
		{"max_conns 100001", func(c *Config) { c.Gubernator.MaxConns = 100001 }, "config: gubernator.max_conns = 100001: must be between 1 and 100000"},
		{"max_requests 0", func(c *Config) { c.Gubernator.MaxRequests = 0 }, "config: gubernator.max_requests = 0: must be between 1 and 100000"},
		{"max_requests 100000", func(c *Config) { c.Gubernator.MaxRequests = 100000 }, ""},
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

func TestParseGubernator(t *testing.T) {
	c, err := Parse([]byte("[gubernator]\ngrpc = \"127.0.0.1:1051\"\nhttp = \"127.0.0.1:1050\"\nmax_conns = 7\nmax_requests = 9\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Gubernator != (Gubernator{GRPC: "127.0.0.1:1051", HTTP: "127.0.0.1:1050", MaxConns: 7, MaxRequests: 9}) {
		t.Errorf("Gubernator = %+v", c.Gubernator)
	}
	if _, err := Parse([]byte("[gubernator]\nlisten = \"127.0.0.1:1051\"\n")); err == nil {
		t.Error("Parse accepted the unknown key gubernator.listen")
	}
}
