package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidatePathsCleaned(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string // "" if valid, else the whole error text
	}{
		{"charge_unix the socket by another spelling", func(c *Config) { c.Listen.Unix, c.Listen.ChargeUnix = "/d/q.sock", "/d/./q.sock" },
			`config: listen.charge_unix = "/d/./q.sock": must be another socket than listen.unix (both are /d/q.sock)`},
		{"charge_unix through ..", func(c *Config) { c.Listen.Unix, c.Listen.ChargeUnix = "/d/q.sock", "/d/e/../q.sock" },
			`config: listen.charge_unix = "/d/e/../q.sock": must be another socket than listen.unix (both are /d/q.sock)`},
		{"state.file the charge socket", func(c *Config) { c.Listen.ChargeUnix, c.State.File = "/d/c.sock", "/d/c.sock" },
			`config: state.file = "/d/c.sock": must be another file than listen.charge_unix`},
		{"state.file a socket's lock", func(c *Config) { c.Listen.Unix, c.State.File = "/d/q.sock", "/d/q.sock.lock" },
			`config: state.file = "/d/q.sock.lock": must be another file than listen.unix's lock file`},
		{"http socket the main socket's lock", func(c *Config) { c.Listen.Unix, c.HTTP.Listen = "/d/q.sock", "unix:/d/q.sock.lock" },
			`config: http.listen = "unix:/d/q.sock.lock": must be another file than listen.unix's lock file`},
		{"rls socket the spoe socket", func(c *Config) { c.SPOE.Listen, c.RLS.Listen = "unix:/d/s.sock", "unix://d/s.sock" },
			`config: rls.listen = "unix://d/s.sock": must be another socket than spoe.listen (both are /d/s.sock)`},
		{"spoe socket the http socket", func(c *Config) { c.HTTP.Listen, c.SPOE.Listen = "unix:/d/h.sock", "unix:/d/h.sock" },
			`config: spoe.listen = "unix:/d/h.sock": must be another socket than http.listen`},
		{"sockets apart", func(c *Config) {
			c.Listen.Unix, c.Listen.ChargeUnix, c.HTTP.Listen, c.SPOE.Listen, c.RLS.Listen, c.State.File =
				"/d/q.sock", "/d/c.sock", "unix:/d/h.sock", "unix:/d/s.sock", "unix:/d/r.sock", "/d/state"
		}, ""},
		{"abstract sockets are no files", func(c *Config) { c.Listen.Unix, c.Listen.ChargeUnix = "@q", "/d/c.sock" }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.set(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v, want nil", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Fatalf("Validate:\n got %v\nwant %s", err, tc.want)
			}
		})
	}
}

func TestCheckPathsResolved(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(real, "cfg.toml"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(real)
	cfgFile := NamedPath{Name: "the config file", Path: filepath.Join(dir, "link", "cfg.toml")}
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string // a part of the error; "" if none
	}{
		{"through a linked directory", func(c *Config) {
			c.Listen.Unix, c.Listen.ChargeUnix = filepath.Join(real, "q.sock"), filepath.Join(dir, "link", "q.sock")
		}, "listen.charge_unix = \"" + filepath.Join(dir, "link", "q.sock") + "\": must be another socket than listen.unix (both are " + filepath.Join(real, "q.sock") + ")"},
		{"relative against absolute", func(c *Config) { c.Listen.Unix, c.State.File = filepath.Join(real, "q.sock"), "q.sock" },
			`state.file = "q.sock": must be another file than listen.unix`},
		{"in a directory not there yet", func(c *Config) {
			c.Listen.Unix, c.State.File = filepath.Join(real, "new", "q.sock"), filepath.Join(dir, "link", "new", "q.sock")
		}, `state.file = "` + filepath.Join(dir, "link", "new", "q.sock") + `": must be another file than listen.unix`},
		{"state.file the config file", func(c *Config) { c.State.File = "cfg.toml" },
			`state.file = "cfg.toml": must be another file than the config file`},
		{"socket the config file", func(c *Config) { c.Listen.Unix = "cfg.toml" },
			`listen.unix = "cfg.toml": must be another file than the config file`},
		{"state.file a directory", func(c *Config) { c.State.File = dir },
			`state.file = "` + dir + `": exists and is not a regular file (d---------)`},
		{"apart", func(c *Config) {
			c.Listen.Unix, c.Listen.ChargeUnix, c.State.File = filepath.Join(real, "q.sock"), filepath.Join(dir, "link", "c.sock"), "state"
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.set(&c)
			if err := c.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			err := c.CheckPaths(cfgFile)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("CheckPaths: %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("CheckPaths:\n got %v\nwant one with %s", err, tc.want)
			}
		})
	}
}
