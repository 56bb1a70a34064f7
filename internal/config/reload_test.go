package config

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

// liveKeys are the keys a reload applies to the running daemon, each with
// where package internal/daemon applies it. Every other key is tagged
// reload:"restart..." on its field: a new key must be one or the other.
var liveKeys = map[string]string{
	"listen.max_tag_bytes": "reload.go: Table.Reconfigure(tableConfig(next))",
	"limit.rate":           "reload.go: Table.Reconfigure(tableConfig(next))",
	"limit.burst":          "reload.go: Table.Reconfigure(tableConfig(next))",
	"limit.limit":          "reload.go: Table.Reconfigure(tableConfig(next)), through Limit.Bucket",
	"limit.per":            "reload.go: Table.Reconfigure(tableConfig(next)), through Limit.Bucket",
	"limit.quotas":         "reload.go: Table.Reconfigure(tableConfig(next)), Policy.Quotas",
	"limit.max_tags":       "reload.go: Table.Reconfigure(tableConfig(next))",
	"limit.dry_run":        "reload.go: Table.Reconfigure(tableConfig(next))",
	"policy.name":          "reload.go: Table.Reconfigure(tableConfig(next))",
	"policy.prefix":        "reload.go: Table.Reconfigure(tableConfig(next))",
	"policy.rate":          "reload.go: Table.Reconfigure(tableConfig(next))",
	"policy.burst":         "reload.go: Table.Reconfigure(tableConfig(next))",
	"policy.limit":         "reload.go: Table.Reconfigure(tableConfig(next)), through Policy.Bucket",
	"policy.per":           "reload.go: Table.Reconfigure(tableConfig(next)), through Policy.Bucket",
	"policy.quotas":        "reload.go: Table.Reconfigure(tableConfig(next)), Policy.Quotas",
	"policy.action":        "reload.go: Table.Reconfigure(tableConfig(next))",
	"policy.dry_run":       "reload.go: Table.Reconfigure(tableConfig(next))",
	"gossip.interval":      "reload.go: Node.Update, SetLearning's SilentAfter; relay.go: reloadRelay's hold interval",
	"gossip.secret_file":   "reload.go: readSecret, then Node.Update's Key and SetLearning",
	"gossip.max_packet":    "reload.go: Node.Update's MaxPacket",
	"gossip.max_peers":     "reload.go: SetLearning(learnMax(next.Gossip, key))",
	"policy.partition":     "reload.go: reconfigureTable(next), share.go scales the policies under share",
	"gossip.partition":     "reload.go: reconfigureTable(next), share.go scales the policies under share",
	"gossip.forget_after":  "reload.go: Node.SetForgetAfter",
	"relay.hold":           "relay.go: reloadRelay, node.SetRelay(relayConfig(next))",
	"relay.peers":          "relay.go: reloadRelay, link.SetPeers on a relay that started as one",
	"http.refuse_status":   "reload.go: SetRefuseStatus",
	"rls.unmatched":        "rls.go: SetOptions",
	"rls.charge_key":       "rls.go: SetOptions",
	"log.level":            "reload.go: d.level.Set",
	"state.file":           "daemon.go: Close saves to the running config's state.file",
}

// TestEveryKeyLiveOrRestart: each key of the schema is either applied by
// a reload or tagged as needing a restart, never both.
func TestEveryKeyLiveOrRestart(t *testing.T) {
	for _, k := range schema {
		if k.kind == kindTable || k.kind == kindTables {
			continue
		}
		_, live := liveKeys[k.name]
		switch {
		case live && k.reload != "":
			t.Errorf("%s: tagged reload:%q and listed as live", k.name, k.reload)
		case !live && k.reload == "":
			t.Errorf("%s: neither tagged reload:\"restart\" nor listed in liveKeys with where a reload applies it", k.name)
		}
	}
	for name := range liveKeys {
		if !known[name] {
			t.Errorf("liveKeys lists %s, which Config does not have", name)
		}
	}
}

// TestRestartKeysOneChange changes each key alone: a key tagged
// reload:"restart", and only it, is named; a live one names nothing.
func TestRestartKeysOneChange(t *testing.T) {
	cur := Default()
	for _, k := range schema {
		_, live := liveKeys[k.name]
		if k.inArray || !live && k.reload != "restart" {
			continue
		}
		next := Default()
		differ(t, reflect.ValueOf(&next).Elem().FieldByIndex(k.index))
		var want []string
		if !live {
			want = []string{k.name}
		}
		if got := RestartKeys(cur, next); !slices.Equal(got, want) {
			t.Errorf("%s changed: RestartKeys = %v, want %v", k.name, got, want)
		}
	}
}

// differ sets v to a value other than its own.
func differ(t *testing.T, v reflect.Value) {
	t.Helper()
	switch {
	case v.Type() == reflect.TypeFor[Duration]():
		v.Set(reflect.ValueOf(Duration{v.Interface().(Duration).Duration + time.Second}))
	case v.Kind() == reflect.String:
		v.SetString(v.String() + "x")
	case v.Kind() == reflect.Int:
		v.SetInt(v.Int() + 1)
	case v.Kind() == reflect.Float64:
		v.SetFloat(v.Float() + 1)
	case v.Kind() == reflect.Bool:
		v.SetBool(!v.Bool())
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.String:
		v.Set(reflect.Append(v, reflect.ValueOf("x")))
	default:
		t.Fatalf("no way to change a %s", v.Type())
	}
}

func TestRestartKeys(t *testing.T) {
	const serving = "relay.mode (serve: the link to other segments opens at start)"
	for _, tc := range []struct {
		name      string
		cur, next func(*Config) // next changes what cur set
		want      []string
	}{
		{"nothing", nil, nil, nil},
		{"live keys", nil, func(c *Config) {
			c.Limit.Rate, c.Listen.MaxTagBytes, c.Log.Level, c.HTTP.RefuseStatus = 5, 64, "debug", 429
			c.Policy = []Policy{{Prefix: "login:", Rate: 1, Burst: 1}}
		}, nil},
		{"spoe", nil, func(c *Config) { c.SPOE.Listen, c.SPOE.MaxConns = "127.0.0.1:9000", 10 }, []string{"spoe.listen", "spoe.max_conns"}},
		{"in the order of Config", nil, func(c *Config) { c.Log.Format, c.SPOE.Listen, c.Listen.TCP = "json", "unix:/s", ":1" },
			[]string{"listen.tcp", "spoe.listen", "log.format"}},
		{"peers on", nil, func(c *Config) { c.Gossip.Peers = []string{"a:1"} }, []string{"gossip.peers (on or off)"}},
		{"peers off", func(c *Config) { c.Gossip.Peers = []string{"a:1"} }, func(c *Config) { c.Gossip.Peers = nil }, []string{"gossip.peers (on or off)"}},
		{"other peers", func(c *Config) { c.Gossip.Peers = []string{"a:1"} }, func(c *Config) { c.Gossip.Peers = []string{"b:1", "c:1"} }, nil},
		{"becoming a relay", nil, func(c *Config) { c.Relay.Mode = RelayServe }, []string{serving}},
		{"ceasing to be one", func(c *Config) { c.Relay.Mode = RelayServe }, func(c *Config) { c.Relay.Mode = RelayUse }, []string{serving}},
		{"off to use", nil, func(c *Config) { c.Relay.Mode = RelayUse }, nil},
		{"a relay's bind", func(c *Config) { c.Relay.Mode = RelayServe }, func(c *Config) { c.Relay.Mode, c.Relay.Bind = RelayServe, ":1" },
			[]string{"relay.bind"}},
		{"bind, not a relay", nil, func(c *Config) { c.Relay.Bind = ":1" }, nil},
		{"becoming a relay on another bind", nil, func(c *Config) { c.Relay.Mode, c.Relay.Bind = RelayServe, ":1" }, []string{serving}},
	} {
		cur, next := Default(), Default()
		if tc.cur != nil {
			tc.cur(&cur)
			tc.cur(&next)
		}
		if tc.next != nil {
			tc.next(&next)
		}
		if got := RestartKeys(cur, next); !slices.Equal(got, tc.want) {
			t.Errorf("%s: RestartKeys = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestBadReloadTag: a reload tag that names no rule, or that sits on a
// table or in an array of tables, stops the schema from being built.
func TestBadReloadTag(t *testing.T) {
	type elem struct {
		X int `toml:"x" reload:"restart"`
	}
	type sub struct {
		Y int `toml:"y"`
	}
	for name, typ := range map[string]reflect.Type{
		"no such rule": reflect.TypeFor[struct {
			X int `toml:"x" reload:"later"`
		}](),
		"on a table": reflect.TypeFor[struct {
			S sub `toml:"s" reload:"restart"`
		}](),
		"in an array of tables": reflect.TypeFor[struct {
			E []elem `toml:"e"`
		}](),
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: buildSchema did not panic", name)
				}
			}()
			buildSchema(typ, nil, nil, false)
		}()
	}
}
