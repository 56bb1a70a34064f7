package config

import "reflect"

// A running daemon applies a reloaded Config whole, except the keys whose
// field carries a reload tag: those it reads once, at start (a socket, a
// server, the log's format), and a reload keeps their running value. The
// tag names the rule that says which changes need a restart; a key
// without one changes on reload.
//
//	reload:"restart"          any change
//	reload:"restart-on-off"   only turning it on or off: empty to set, or back
//	reload:"restart-serve"    only becoming or ceasing to be a relay (relay.mode)
//	reload:"restart-serving"  any change on a daemon running as a relay

// restartRule says when a change of a key needs a restart, what
// [RestartKeys] appends to the key's name when it does, and how the
// reference in docs/configuration.md says it.
type restartRule struct {
	note  string
	needs func(cur, next *Config, a, b reflect.Value) bool // a and b: the key's values in cur and next
	doc   string                                           // the reference's "on reload" column for the key
}

// restartRules are the values a reload tag may have.
var restartRules = map[string]restartRule{
	"restart": {"", func(_, _ *Config, a, b reflect.Value) bool { return changed(a, b) }, "restart"},
	// The transport opens at start if the key is set; while it runs, it
	// takes a changed value.
	"restart-on-off": {" (on or off)", func(_, _ *Config, a, b reflect.Value) bool {
		return (a.Len() > 0) != (b.Len() > 0)
	}, "live; turning it on or off needs a restart"},
	// The link to other segments' relays opens at start, on a relay only;
	// the other modes switch live.
	"restart-serve": {" (serve: the link to other segments opens at start)", func(_, _ *Config, a, b reflect.Value) bool {
		return (a.String() == RelayServe) != (b.String() == RelayServe)
	}, `live; becoming or ceasing to be a relay ("serve") needs a restart`},
	// The key is the link's, which only a relay opens: elsewhere it is
	// unused until the daemon starts as one.
	"restart-serving": {"", func(cur, _ *Config, a, b reflect.Value) bool {
		return cur.Relay.Mode == RelayServe && changed(a, b)
	}, "restart on a relay; elsewhere unused until the daemon starts as one"},
}

func changed(a, b reflect.Value) bool { return !reflect.DeepEqual(a.Interface(), b.Interface()) }

// RestartKeys names the keys a daemon running cur cannot change to their
// value in next, a reloaded Config: those whose reload tag's rule says the
// change needs a restart. Names are dotted, in the order of Config, some
// with a note of the rule: "listen.unix", "gossip.peers (on or off)". nil
// means a reload applies next whole.
func RestartKeys(cur, next Config) []string {
	var keys []string
	cv, nv := reflect.ValueOf(cur), reflect.ValueOf(next)
	for _, k := range schema {
		if k.reload == "" {
			continue
		}
		r := restartRules[k.reload]
		if r.needs(&cur, &next, cv.FieldByIndex(k.index), nv.FieldByIndex(k.index)) {
			keys = append(keys, k.name+r.note)
		}
	}
	return keys
}
