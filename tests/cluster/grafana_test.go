package cluster

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/netns"
	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/tests/harness"
	dto "github.com/prometheus/client_model/go"
)

// The Grafana dashboard shipped in contrib/grafana: its JSON holds
// together, every panel reads from the dashboard's data source, and every
// dthrottle_ metric its queries name is one a real daemon serves, read
// from the /metrics of daemons that have everything turned on.

// TestGrafanaDashboard: the dashboard is valid JSON of a current schema;
// its panel ids are unique; every panel and every target reads from the
// dashboard's Prometheus data source variable; there are job and instance
// variables, and every dthrottle_ selector of a panel is narrowed to
// them; every query is a non-empty expression with its brackets matched.
func TestGrafanaDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.SchemaVersion < 39 {
		t.Errorf("schemaVersion %d: want a current Grafana's (39 or later)", d.SchemaVersion)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: want both set, so that provisioning keeps one dashboard", d.UID, d.Title)
	}

	// The data sources a panel may name: a datasource variable, or an
	// input that importing fills in.
	sources := map[string]bool{}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		var q string
		if v.Type == "datasource" && json.Unmarshal(v.Query, &q) == nil && q == "prometheus" {
			sources[v.Name] = true
		}
	}
	for _, in := range d.Inputs {
		if in.Type == "datasource" && in.PluginID == "prometheus" {
			sources[in.Name] = true
		}
	}
	if len(sources) == 0 {
		t.Fatal("no Prometheus datasource variable or input for the panels to read from")
	}
	for _, name := range []string{"job", "instance"} {
		if vars[name] != "query" {
			t.Errorf("no query variable %q (have %v)", name, vars)
		}
	}
	checkSource := func(where string, raw json.RawMessage) {
		t.Helper()
		var ds struct{ Type, UID string }
		if len(raw) == 0 || string(raw) == "null" || json.Unmarshal(raw, &ds) != nil {
			t.Errorf("%s: datasource %s: want {\"type\": \"prometheus\", \"uid\": \"${...}\"}", where, raw)
			return
		}
		name := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(ds.UID, "$"), "{"), "}")
		if ds.Type != "prometheus" || !sources[name] {
			t.Errorf("%s: datasource %s: not the dashboard's Prometheus data source (%v)", where, raw, sources)
		}
	}

	ids := map[int]string{}
	panels := d.allPanels()
	for _, p := range panels {
		where := fmt.Sprintf("panel %q", p.Title)
		if p.ID == nil {
			t.Errorf("%s has no id", where)
		} else if other, dup := ids[*p.ID]; dup {
			t.Errorf("%s has the id %d of panel %q", where, *p.ID, other)
		} else {
			ids[*p.ID] = p.Title
		}
		checkSource(where, p.Datasource)
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("%s has no query", where)
		}
		if p.GridPos.W < 1 || p.GridPos.X+p.GridPos.W > 24 || p.GridPos.H < 1 {
			t.Errorf("%s: gridPos %+v outside the 24 columns", where, p.GridPos)
		}
		for _, tg := range p.Targets {
			checkSource(fmt.Sprintf("%s target %s", where, tg.RefID), tg.Datasource)
		}
	}
	for _, a := range d.Annotations.List {
		if a.BuiltIn == 0 {
			checkSource(fmt.Sprintf("annotation %q", a.Name), a.Datasource)
		}
	}

	narrowed := regexp.MustCompile(`^dthrottle_[a-z0-9_]+\{[^}]*\bjob=~"\$job"[^}]*\binstance=~"\$instance"`)
	qs := d.queries(t)
	for _, q := range qs {
		if strings.TrimSpace(q.expr) == "" {
			t.Errorf("%s: empty expression", q.where)
			continue
		}
		if why := balanced(q.expr); why != "" {
			t.Errorf("%s: %s in %s", q.where, why, q.expr)
		}
		if !q.panel {
			continue
		}
		for _, at := range metricName.FindAllStringIndex(q.expr, -1) {
			if !narrowed.MatchString(q.expr[at[0]:]) {
				t.Errorf("%s: %s is not narrowed to {job=~\"$job\",instance=~\"$instance\"} in %s",
					q.where, q.expr[at[0]:at[1]], q.expr)
			}
		}
	}
	if len(dashboardMetrics(qs)) == 0 {
		t.Fatal("the dashboard reads no dthrottle_ metric")
	}
	t.Logf("%d panels, %d queries, %d dthrottle_ metrics", len(panels), len(qs), len(dashboardMetrics(qs)))
}

// grafanaPolicies are policies of every kind the metrics label: a limit,
// and a dry-run limit.
const grafanaPolicies = `
[[policy]]
name = "login"
prefix = "login:"
rate = 0.001
burst = 1
[[policy]]
name = "try"
prefix = "try:"
rate = 0.001
burst = 1
dry_run = true
`

// Ports of the ways in on each host; each host has a network namespace of
// its own, so they are free there.
const (
	grafanaHTTPPort  = 7072
	grafanaSPOEPort  = 7074
	grafanaRelayPort = 7778
)

// grafanaConfig turns on, beside the multicast gossip, the admin endpoint
// and the signed reports of host.configFor, every part of the daemon that
// has metrics: a relay (serve) or a relay's user, the state file, the HTTP
// decision endpoint and the SPOE agent. Warm start is on by default.
func grafanaConfig(h *harness.Host, secret, state string, relay bool) harness.NodeConfig {
	mode := `mode = "use"`
	if relay {
		mode = fmt.Sprintf("mode = \"serve\"\nbind = \"%s:%d\"", h.Addr, grafanaRelayPort)
	}
	return harness.NodeConfig{Rate: 0.001, Burst: 3, Secret: secret, Policies: grafanaPolicies,
		Gossip: fmt.Sprintf(`warm_start = true
[relay]
%s
[state]
file = %q
[http]
listen = "%s:%d"
[spoe]
listen = "%s:%d"
`, mode, state, h.Addr, grafanaHTTPPort, h.Addr, grafanaSPOEPort)}
}

// familyPresent waits until d's /metrics serves name.
func familyPresent(t *testing.T, d *harness.Daemon, name string) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("%s on %s", name, d.Admin), func() bool {
		_, ok := harness.Scrape(t, d.AdminAddr(t))[name]
		return ok
	})
}

// TestGrafanaMetricsServed: every dthrottle_ metric the dashboard reads is
// served by real daemons configured with everything on. Two hosts on a
// bridge, in namespaces the test creates (as the multi-host tests'): A, a
// relay, restarted once so that it reads its state file back; B, a
// relay's user, started on a corrupt state file and warming from A. Both
// serve the HTTP decision endpoint and the SPOE agent, and see traffic on
// every way in.
func TestGrafanaMetricsServed(t *testing.T) {
	if !netns.Run(t) {
		return
	}
	want := dashboardMetrics(loadDashboard(t).queries(t))
	l := harness.NewLAN(t, 2)
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	harness.Must(t, os.WriteFile(secret, []byte("the cluster's secret, 32 bytes.."), 0o600))
	stateA, stateB := filepath.Join(dir, "a.state"), filepath.Join(dir, "b.state")
	harness.Must(t, os.WriteFile(stateB, []byte("not a state file: B ignores it\n"), 0o600))
	hA, hB := l.Hosts[0], l.Hosts[1]

	// A's first run leaves a state file behind, which its second reads.
	a := hA.Start(t, grafanaConfig(hA, secret, stateA, true))
	if got := harness.Pipeline(t, a.Sock, "spent\nspent\nspent\nspent\n"); got != "OK\nOK\nOK\nNO\n" {
		t.Fatalf("spending a tag before the restart: %q", got)
	}
	a.Stop(t)
	if _, err := os.Stat(stateA); err != nil {
		t.Fatalf("no state file after a clean stop: %v", err)
	}
	a = hA.Restart(t)
	b := hB.Start(t, grafanaConfig(hB, secret, stateB, false))
	harness.AwaitPeers(t, []*harness.Daemon{a, b}, 1)

	// Traffic on every way in: the query socket (limits, a dry run, an
	// empty tag), the HTTP endpoint, the SPOE agent (a frame it refuses),
	// and a reload.
	for i, d := range []*harness.Daemon{a, b} {
		// Tags of each daemon's own, which no report of the other spent.
		in := strings.ReplaceAll("x%\nx%\nx%\nx%\nlogin:%\nlogin:%\ntry:%\ntry:%\n\n", "%", fmt.Sprint(i))
		if got := harness.Pipeline(t, d.Sock, in); got != "OK\nOK\nOK\nNO\nOK\nNO\nOK\nOK\nOK\n" {
			t.Fatalf("queries on %s: %q", d.Sock, got)
		}
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	for _, h := range []*harness.Host{hA, hB} {
		for range 4 {
			res, err := hc.Get(fmt.Sprintf("http://%s:%d/v1/allow?tag=web", h.Addr, grafanaHTTPPort))
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
		}
		c, err := net.DialTimeout("tcp", fmt.Sprintf("%s:%d", h.Addr, grafanaSPOEPort), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write([]byte{0, 0, 0, 1, 0xff}) // a one-byte frame of no known type
		c.Read(make([]byte, 64))
		c.Close()
	}
	harness.Must(t, a.Cmd.Process.Signal(syscall.SIGHUP))
	testkit.WaitFor(t, 10*time.Second, "A's reload to be counted", func() bool {
		return harness.Metric(t, harness.Scrape(t, a.AdminAddr(t)), "dthrottle_config_reloads_total") == 1
	})

	// Families served once something happened: a report sent, a warm
	// start done, the relay heard.
	for _, d := range []*harness.Daemon{a, b} {
		familyPresent(t, d, "dthrottle_gossip_last_report_timestamp_seconds")
		familyPresent(t, d, "dthrottle_warm_duration_seconds")
	}
	testkit.WaitFor(t, 10*time.Second, "B to hear A as its segment's relay", func() bool {
		return harness.Metric(t, harness.Scrape(t, b.AdminAddr(t)), "dthrottle_relay_relays", "where=segment") == 1
	})
	for _, d := range []*harness.Daemon{a, b} {
		testkit.WaitFor(t, 10*time.Second, "the SPOE connection to be counted on "+d.Admin, func() bool {
			return harness.Metric(t, harness.Scrape(t, d.AdminAddr(t)), "dthrottle_spoe_connections_accepted_total") >= 1
		})
	}

	// Every name on A, but those its configuration cannot serve together
	// with another, which B serves.
	onB := map[string]string{
		// A daemon either reads its state file back (A:
		// dthrottle_state_load_*) or ignores it (B, on a corrupt file).
		"dthrottle_state_ignored": "B ignored its corrupt state file",
	}
	famsA, famsB := harness.Scrape(t, a.AdminAddr(t)), harness.Scrape(t, b.AdminAddr(t))
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fams, node := famsA, "A"
		if _, ok := onB[n]; ok {
			fams, node = famsB, "B"
		}
		if !servedFamily(fams, n) {
			t.Errorf("%s, read by %s, is not served by %s's /metrics", n, want[n], node)
		}
	}
	for n := range onB {
		if _, ok := want[n]; !ok {
			t.Errorf("%s is excused from A's scrape but the dashboard does not read it", n)
		}
	}

	// Families served that the dashboard does not show, for the log.
	var unshown []string
	for _, fams := range []map[string]*dto.MetricFamily{famsA, famsB} {
		for n := range fams {
			if _, ok := want[n]; !ok && strings.HasPrefix(n, "dthrottle_") && !slices.Contains(unshown, n) {
				unshown = append(unshown, n)
			}
		}
	}
	sort.Strings(unshown)
	t.Logf("%d dthrottle_ metrics read by the dashboard, all served; served and not on the dashboard: %v", len(names), unshown)
}
