package admin

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/api"
	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/gossip"
	"golang.org/x/net/html"
)

// statusServer is a server over src on the fake clock t0 whose history
// holds a minute of the fake snapshot's policies, and the page it serves.
func statusServer(t *testing.T, src Sources, pols func(step int) []bucket.PolicyStats) (*Server, string) {
	t.Helper()
	s, err := newServer(Config{Addr: "127.0.0.1:0"}, src, func() time.Time { return t0 })
	if err != nil {
		t.Fatal(err)
	}
	for step := range 13 {
		s.hist.record(t0.Add(time.Duration(step-12)*historyStep), pols(step))
	}
	res, body := do(t, s.Handler(), http.MethodGet, "/")
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET /: %d %s\n%s", res.StatusCode, res.Header.Get("Content-Type"), body)
	}
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script") {
		t.Errorf("Content-Security-Policy %q: want default-src 'none' and no script source", csp)
	}
	return s, body
}

// growing is two policies counting up: default serves 10 and refuses 2
// per step, login serves 1 and refuses 3.
func growing(step int) []bucket.PolicyStats {
	n := uint64(step)
	return []bucket.PolicyStats{pol("default", 10*n, 2*n), pol("login", n, 3*n)}
}

// elements parses page and returns its elements by name, each as its
// attributes and its text.
func elements(t *testing.T, page string) map[string][]element {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]element{}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			e := element{attrs: map[string]string{}, text: text(n)}
			for _, a := range n.Attr {
				e.attrs[a.Key] = a.Val
			}
			out[n.Data] = append(out[n.Data], e)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	return out
}

type element struct {
	attrs map[string]string
	text  string
}

func text(n *html.Node) string {
	var b strings.Builder
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

// byID returns the element of that name and id.
func byID(t *testing.T, els map[string][]element, name, id string) element {
	t.Helper()
	for _, e := range els[name] {
		if e.attrs["id"] == id {
			return e
		}
	}
	t.Fatalf("no <%s id=%q> in the page", name, id)
	return element{}
}

func TestStatusPage(t *testing.T) {
	f := newFake()
	f.peers = []gossip.PeerInfo{
		{Node: 0x9f86d081884c7d65, Addr: "10.0.0.2:7777", LastHeard: t0.Add(-400 * time.Millisecond), Packets: 123, Hits: 4567, FingerprintMatch: true,
			Behind: 1020 * time.Millisecond},
		{Node: 0xc3d4e5f6a7b8c9d0, Addr: "10.0.0.3:7777", LastHeard: t0.Add(-10 * time.Second), Silent: true, Found: "learned", Relay: "segment"},
		{Node: 0x2a, Addr: "10.0.0.4:7777", LastHeard: t0.Add(-20 * time.Second), Silent: true, Missing: true},
	}
	ft := newFakeTop()
	ft.doc.Policies[0].Tags[1].Tag = "\x1b[2J\x1b]0;owned\x07"
	src := f.sources()
	src.Top = ft.top
	_, page := statusServer(t, src, growing)

	if strings.Contains(page, "<script>alert") || strings.Contains(strings.ToLower(page), "<script") {
		t.Error("the page holds a <script>")
	}
	for _, want := range []string{
		"&lt;script&gt;alert(1)&lt;/script&gt;", // the tag, as text
		`login:\xff\xfe`,                        // invalid UTF-8, visible
		`\x1b[2J\x1b]0;owned\x07`,               // controls, visible
		"decisions <b>3.2</b>/s, refusals <b>1</b>/s",
		"peers: <b>1</b> live",
		"2 silent",
		`1 missing: this node's share 0.75`,
		"9f86d081884c7d65",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if got := ft.called(); len(got) != 1 || got[0] != `refused cluster "" 10` {
		t.Errorf("Top called %q, want once for the 10 most refused tags of the cluster", got)
	}

	els := elements(t, page)
	if n := len(els["script"]); n != 0 {
		t.Errorf("%d <script> elements", n)
	}
	if n := len(els["svg"]); n != 2 {
		t.Errorf("%d <svg> charts, want 2", n)
	}
	for _, id := range []string{"decisions", "refusals"} {
		byID(t, els, "svg", id)
	}
	lines := els["polyline"]
	if len(lines) != 4 { // two policies on two charts
		t.Fatalf("%d polylines, want 4", len(lines))
	}
	for _, l := range lines {
		if pts := strings.Fields(l.attrs["points"]); len(pts) != 12 {
			t.Errorf("polyline %q: %d points, want 12", l.text, len(pts))
		}
	}
	if got := lines[0].text + "," + lines[1].text; got != "default,login" {
		t.Errorf("lines %s, want default,login (the busiest first)", got)
	}
	// The last point of default's decisions line is 12 per 5 s; the
	// chart's top is 2.5/s, so it sits at 96% of the plot's height.
	if pts := strings.Fields(lines[0].attrs["points"]); pts[11] != fmt.Sprintf("%.1f,%.1f", float64(chartW-chartRight), chartTop+0.04*(chartH-chartTop-chartBot)) {
		t.Errorf("default's last point %s", pts[11])
	}
	pols := byID(t, els, "table", "policies").text
	for _, want := range []string{"default", "60", "11.8%", "login"} {
		if !strings.Contains(pols, want) {
			t.Errorf("policies table %q lacks %q", pols, want)
		}
	}
	peers := byID(t, els, "table", "peers").text
	for _, want := range []string{"10.0.0.2:7777", "live", "400ms ago", "1.02 s", "10.0.0.3:7777", "silent", "differ", "learned", "segment", "10.0.0.4:7777", "missing"} {
		if !strings.Contains(peers, want) {
			t.Errorf("peers table lacks %q:\n%s", want, peers)
		}
	}
	top := byID(t, els, "table", "top").text
	for _, want := range []string{"default: 1000 refused; a tag not listed had at most 4", "10.0.0.0", "<script>alert(1)</script>", "60.0%"} {
		if !strings.Contains(top, want) {
			t.Errorf("top table lacks %q:\n%s", want, top)
		}
	}
	if strings.Contains(top, "quiet") {
		t.Errorf("top table shows a policy with no tags:\n%s", top)
	}
	if res, _ := do(t, handler(t, src), http.MethodHead, "/"); res.StatusCode != 200 {
		t.Errorf("HEAD /: %d", res.StatusCode)
	}
}

// A standalone daemon without history nor Sources.Top: the page says so
// rather than draw empty charts.
func TestStatusPageEmpty(t *testing.T) {
	f := newFake()
	f.snap.Gossip = nil
	src := f.sources()
	src.Peers = nil
	h := handler(t, src)
	res, page := do(t, h, http.MethodGet, "/")
	if res.StatusCode != 200 {
		t.Fatalf("GET /: %d", res.StatusCode)
	}
	for _, want := range []string{"No history yet", "Gossip is off", "Not available from this daemon", "gossip off", "decisions <b>-</b>/s"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if els := elements(t, page); len(els["svg"]) != 0 || len(els["table"]) != 1 {
		t.Errorf("%d charts and %d tables, want none and the policies", len(els["svg"]), len(els["table"]))
	}

	src.Top = func(by, scope, policy string, n int) api.Top { return api.Top{WindowSeconds: 60, Nodes: 1} }
	if _, page := do(t, handler(t, src), http.MethodGet, "/"); !strings.Contains(page, "No refusals in the window") {
		t.Errorf("page with an empty top lacks \"No refusals in the window\"")
	}
}

// However many policies, a chart draws historyNamed lines and one for all
// the others.
func TestStatusPageManyPolicies(t *testing.T) {
	_, page := statusServer(t, newFake().sources(), func(step int) []bucket.PolicyStats {
		var ps []bucket.PolicyStats
		for i := range 50 {
			ps = append(ps, pol(fmt.Sprintf("p%02d", i), uint64(step*(i+1)), uint64(step)))
		}
		return ps
	})
	els := elements(t, page)
	if n := len(els["polyline"]); n != 2*(historyNamed+1) {
		t.Errorf("%d lines, want %d on each of 2 charts", n, historyNamed+1)
	}
	legend := els["li"]
	if len(legend) != historyNamed+1 || legend[0].text != "p49" || legend[historyNamed].text != "all other policies" {
		t.Errorf("legend: %v", legend)
	}
}

func TestVisible(t *testing.T) {
	for in, want := range map[string]string{
		"1.2.3.4":          "1.2.3.4",
		"<b>&amp;":         "<b>&amp;", // the template escapes HTML
		"caf\u00e9 \u4e16": "caf\u00e9 \u4e16",
		"a\x00b\tc\x7f":    `a\x00b\x09c\x7f`,
		"\u202eevil":       `\u202eevil`,
		"bad\xff":          `bad\xff`,
		"\x1b":             `\x1b`,
		`\x1b`:             `\\x1b`,
		"a\u200bb\ufeff":   `a\u200bb\ufeff`,
		"\u0085\u00ad":     `\u0085\u00ad`,
	} {
		if got := shown(in, false); got != want {
			t.Errorf("shown(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNiceCeil(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{
		{0, 1}, {-1, 1}, {0.3, 0.5}, {1, 1}, {1.01, 2}, {2.2, 2.5}, {3, 5}, {7, 10}, {10, 10}, {12, 20}, {2400, 2500},
	} {
		if got := niceCeil(c.in); got != c.want {
			t.Errorf("niceCeil(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestRate(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want string
	}{
		{0, "0"}, {0.004, "0"}, {0.25, "0.25"}, {3.2, "3.2"}, {12.54, "12.5"}, {50, "50"}, {99.96, "100"},
		{1234.4, "1234"}, {12345, "12.3k"}, {123456, "123k"},
	} {
		if got := rate(c.in); got != c.want {
			t.Errorf("rate(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}
