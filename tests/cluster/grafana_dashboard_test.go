package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// This file owns reading the Grafana dashboard: its JSON model, its
// panels and queries, and the metric names those name.

const dashboardFile = "../../contrib/grafana/dthrottle.json"

// grafanaDashboard is the part of a dashboard's JSON model the tests read.
type grafanaDashboard struct {
	SchemaVersion int            `json:"schemaVersion"`
	UID           string         `json:"uid"`
	Title         string         `json:"title"`
	Panels        []grafanaPanel `json:"panels"`
	Inputs        []struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		PluginID string `json:"pluginId"`
	} `json:"__inputs"`
	Templating struct {
		List []grafanaVariable `json:"list"`
	} `json:"templating"`
	Annotations struct {
		List []struct {
			Name       string          `json:"name"`
			BuiltIn    int             `json:"builtIn"`
			Datasource json.RawMessage `json:"datasource"`
			Expr       string          `json:"expr"`
		} `json:"list"`
	} `json:"annotations"`
}

// grafanaPanel is a panel, or a row whose panels (when collapsed) it
// holds.
type grafanaPanel struct {
	ID         *int            `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	Targets    []struct {
		RefID      string          `json:"refId"`
		Expr       string          `json:"expr"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Panels  []grafanaPanel           `json:"panels"`
}

// grafanaVariable is a templating variable. A query variable's query is
// a string in older dashboards and an object holding it in newer ones.
type grafanaVariable struct {
	Type       string          `json:"type"`
	Name       string          `json:"name"`
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
	Datasource json.RawMessage `json:"datasource"`
}

// promQuery is one PromQL expression of the dashboard and where it is.
type promQuery struct {
	where, expr string
	panel       bool // a panel's or an annotation's, not a variable's
}

// loadDashboard reads and decodes the dashboard, failing on invalid JSON.
func loadDashboard(t *testing.T) grafanaDashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(b) {
		t.Fatalf("%s is not valid JSON", dashboardFile)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// allPanels returns every panel of d, rows and the panels of collapsed
// rows included, in order.
func (d grafanaDashboard) allPanels() []grafanaPanel {
	var out []grafanaPanel
	var walk func([]grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// queries returns every PromQL expression of d: the panels' targets, the
// annotations', and the query variables'.
func (d grafanaDashboard) queries(t *testing.T) []promQuery {
	t.Helper()
	var out []promQuery
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			out = append(out, promQuery{fmt.Sprintf("panel %q target %s", p.Title, tg.RefID), tg.Expr, true})
		}
	}
	for _, a := range d.Annotations.List {
		if a.Expr != "" {
			out = append(out, promQuery{fmt.Sprintf("annotation %q", a.Name), a.Expr, true})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var s string
		var obj struct {
			Query string `json:"query"`
		}
		switch {
		case json.Unmarshal(v.Query, &s) == nil:
		case json.Unmarshal(v.Query, &obj) == nil:
			s = obj.Query
		default:
			t.Fatalf("variable %s: a query neither a string nor an object holding one: %s", v.Name, v.Query)
		}
		for _, q := range []string{s, v.Definition} {
			if q != "" {
				out = append(out, promQuery{fmt.Sprintf("variable %s", v.Name), q, false})
			}
		}
	}
	return out
}

var metricName = regexp.MustCompile(`dthrottle_[a-z0-9_]+`)

// dashboardMetrics returns the dthrottle_ names the queries read, each
// with the first place that reads it.
func dashboardMetrics(qs []promQuery) map[string]string {
	out := map[string]string{}
	for _, q := range qs {
		for _, n := range metricName.FindAllString(q.expr, -1) {
			if _, ok := out[n]; !ok {
				out[n] = q.where
			}
		}
	}
	return out
}

// servedFamily reports whether the scrape serves name: as a family, or as
// a histogram's or a summary's _bucket, _sum or _count series.
func servedFamily(fams map[string]*dto.MetricFamily, name string) bool {
	if _, ok := fams[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, found := strings.CutSuffix(name, suffix)
		if !found {
			continue
		}
		if f, ok := fams[base]; ok {
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				return true
			case dto.MetricType_SUMMARY:
				if suffix != "_bucket" {
					return true
				}
			}
		}
	}
	return false
}

// balanced reports the first bracket of expr that is not closed or not
// opened, outside quoted strings ("" when there is none).
func balanced(expr string) string {
	var stack []rune
	var quote rune
	escaped := false
	for _, r := range expr {
		switch {
		case quote != 0:
			if escaped {
				escaped = false
			} else if r == '\\' {
				escaped = true
			} else if r == quote {
				quote = 0
			}
		case r == '"' || r == '\'' || r == '`':
			quote = r
		case r == '(' || r == '{' || r == '[':
			stack = append(stack, r)
		case r == ')' || r == '}' || r == ']':
			open := map[rune]rune{')': '(', '}': '{', ']': '['}[r]
			if len(stack) == 0 || stack[len(stack)-1] != open {
				return string(r) + " not opened"
			}
			stack = stack[:len(stack)-1]
		}
	}
	if quote != 0 {
		return "string not closed"
	}
	if len(stack) > 0 {
		return string(stack[len(stack)-1]) + " not closed"
	}
	return ""
}
