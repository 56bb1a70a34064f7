package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/gossip/transport"
	mt "github.com/dthrottle/dthrottle/internal/metric/metrictest"
)

// The daemon's own families, and the state file's following reloads:
// what the admin endpoint serves with the ways in and gossip off.
func TestMetricsOwnAndState(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(file, []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := start(t, base+"[state]\nfile = \""+file+"\"\n", nil)
	r.ask(t, "a", "a", "a", "a", "")
	const counter, gauge = mt.Counter, mt.Gauge
	fams := mt.Gather(t, r.collectors()...)
	mt.Expect(t, fams,
		mt.Sample{Name: "dthrottle_build_info", Labels: "version=test", Kind: gauge, Value: 1},
		mt.Sample{Name: "dthrottle_start_time_seconds", Kind: gauge, Value: float64(r.started.UnixNano()) / 1e9},
		mt.Sample{Name: "dthrottle_config_reloads_total", Kind: counter, Value: 0},
		mt.Sample{Name: "dthrottle_config_reload_failures_total", Kind: counter, Value: 0},
		mt.Sample{Name: "dthrottle_queries_total", Labels: "result=ok", Kind: counter, Value: 3},
		mt.Sample{Name: "dthrottle_queries_total", Labels: "result=no", Kind: counter, Value: 1},
		mt.Sample{Name: "dthrottle_requests_total", Kind: counter, Value: 5},
		mt.Sample{Name: "dthrottle_tags", Kind: gauge, Value: 1},
		mt.Sample{Name: "dthrottle_state_ignored", Labels: "reason=corrupt", Kind: gauge, Value: 1},
	)
	for _, off := range []string{"dthrottle_http_", "dthrottle_spoe_", "dthrottle_gossip_"} {
		mt.Absent(t, fams, off)
	}

	// state.file changes on reload: with none, no state_ family.
	if err := os.WriteFile(r.path, []byte(strings.ReplaceAll(base, "%SOCK%", r.sock)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.path, []byte("[limit]\nrate = -1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r.Reload() == nil {
		t.Fatal("a reload of rate -1 succeeded")
	}
	fams = mt.Gather(t, r.collectors()...)
	mt.Expect(t, fams,
		mt.Sample{Name: "dthrottle_config_reloads_total", Kind: counter, Value: 1},
		mt.Sample{Name: "dthrottle_config_reload_failures_total", Kind: counter, Value: 1},
	)
	mt.Absent(t, fams, "dthrottle_state_")
	mt.Lint(t, r.collectors()...)
}

// With the HTTP endpoint, the SPOE agent and gossip on, their families are
// served too; unicast discovery's even without unicast peers.
func TestMetricsWaysAndGossip(t *testing.T) {
	mem := transport.NewMemNetwork(transport.MemConfig{}, time.Now)
	text := base + "[http]\nlisten = \"127.0.0.1:0\"\n[spoe]\nlisten = \"127.0.0.1:0\"\n" +
		"[gossip]\npeers = [\"mem:1\"]\ninterval = \"20ms\"\n"
	r := start(t, text, func(config.Gossip) (transport.Transport, error) { return mem.Join("a"), nil })
	if got := get(t, "tcp", r.HTTPAddr().String(), "a"); !strings.HasPrefix(got, "200 ") {
		t.Fatalf("GET /v1/allow: %q", got)
	}
	const counter, gauge = mt.Counter, mt.Gauge
	fams := mt.Gather(t, r.collectors()...)
	mt.Expect(t, fams,
		mt.Sample{Name: "dthrottle_http_requests_total", Labels: "result=allowed", Kind: counter, Value: 1},
		mt.Sample{Name: "dthrottle_spoe_messages_total", Labels: "result=allowed", Kind: counter, Value: 0},
		mt.Sample{Name: "dthrottle_gossip_peers_learned", Kind: gauge, Value: 0},
		mt.Sample{Name: "dthrottle_gossip_peers_learned_total", Labels: "event=added", Kind: counter, Value: 0},
		mt.Sample{Name: "dthrottle_queries_total", Labels: "result=ok", Kind: counter, Value: 1},
	)
	mt.Lint(t, r.collectors()...)
}
