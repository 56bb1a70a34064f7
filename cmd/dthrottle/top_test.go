package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dthrottle/dthrottle/api"
)

// topJSON is a /v1/top document: the most refused tags of two policies,
// one tag trying to drive the terminal.
const (
	topJSON = `{"by":"refused","scope":"cluster","window_seconds":60,"nodes":3,"policies":[
 {"policy":"default","total":1000,"bound":4,"tags":[{"tag":"10.0.0.1","count":500,"error":0},{"tag":"\u001b[2J\u001b]0;owned\u0007","count":90,"error":4}]},
 {"policy":"login","total":200,"bound":0,"tags":[{"tag":"login:<script>","count":150,"error":1}]}]}`
	servedJSON = `{"by":"served","scope":"node","window_seconds":60,"nodes":1,"policies":[
 {"policy":"login","total":10,"bound":0,"tags":[{"tag":"login:alice","count":7,"error":0}]}]}`
	emptyTopJSON = `{"by":"refused","scope":"cluster","window_seconds":60,"nodes":1,"policies":[{"policy":"default","total":0,"bound":0,"tags":[]}]}`
)

// topAdmin serves /v1/top (the served document for by=served) and
// /v1/stats, and records the queries of /v1/top.
type topAdmin struct {
	*httptest.Server
	mu      sync.Mutex
	queries []string
	top     string
}

func startTopAdmin(t *testing.T) *topAdmin {
	t.Helper()
	a := &topAdmin{top: topJSON}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/top":
			a.mu.Lock()
			a.queries = append(a.queries, r.URL.RawQuery)
			doc := a.top
			a.mu.Unlock()
			if r.URL.Query().Get("policy") == "nope" {
				w.WriteHeader(http.StatusBadRequest)
				w.Write([]byte(`{"error":"policy=\"nope\": no such policy"}`))
				return
			}
			if r.URL.Query().Get("by") == "served" {
				doc = servedJSON
			}
			w.Write([]byte(doc))
		case "/v1/stats":
			w.Write([]byte(statsJSON))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *topAdmin) seen() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.queries...)
}

func TestTopOnce(t *testing.T) {
	a := startTopAdmin(t)
	code, out, errs := runCmd(t, "", "top", "-once", "-admin", a.URL)
	want := `dthrottle top: most refused tags, cluster (3 nodes), last 1m0s, all policies
decisions 100 since start, refusals 10 (10.0%), 2 peers, 1234 tags tracked

REFUSED  ±ERROR   SHARE  POLICY   TAG
    500       0   50.0%  default  "10.0.0.1"
    150       1   75.0%  login    "login:<script>"
     90       4    9.0%  default  "\x1b[2J\x1b]0;owned\a"
`
	if code != exitOK || out != want {
		t.Errorf("top -once: exit %d, stderr %q, output:\n%s\nwant:\n%s", code, errs, out, want)
	}
	code, out, errs = runCmd(t, "", "top", "-once", "-admin", strings.TrimPrefix(a.URL, "http://"), "-by", "served", "-scope", "node", "-policy", "login", "-n", "5")
	want = `dthrottle top: most served tags, node, last 1m0s, policy "login"
decisions 100 since start, refusals 10 (10.0%), 2 peers, 1234 tags tracked

SERVED  ±ERROR   SHARE  POLICY  TAG
     7       0   70.0%  login   "login:alice"
`
	if code != exitOK || out != want {
		t.Errorf("top -once -by served ...: exit %d, stderr %q, output:\n%s\nwant:\n%s", code, errs, out, want)
	}
	if got := a.seen(); len(got) != 2 || got[0] != "by=refused&n=20&scope=cluster" || got[1] != "by=served&n=5&policy=login&scope=node" {
		t.Errorf("queries %q", got)
	}

	a.top = emptyTopJSON
	if code, out, _ := runCmd(t, "", "top", "-once", "-admin", a.URL); code != exitOK || !strings.HasSuffix(out, "\nno tags refused in the last 1m0s\n") {
		t.Errorf("no tags: exit %d, output:\n%s", code, out)
	}
}

func TestTopErrors(t *testing.T) {
	a := startTopAdmin(t)
	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"-once", "-policy", "nope"}, `400 Bad Request: {"error":"policy=\"nope\": no such policy"}`},
		{[]string{"-by", "x"}, `-by "x": must be refused or served`},
		{[]string{"-scope", "x"}, `-scope "x": must be cluster or node`},
		{[]string{"-n", "0"}, `-n 0: must be from 1 to 100`},
		{[]string{"-n", "101"}, `-n 101: must be from 1 to 100`},
		{[]string{"-interval", "1ms"}, `-interval 1ms: must be at least 100ms`},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{nil, "not a terminal: use -once"},
	} {
		code, out, errs := runCmd(t, "", append([]string{"top", "-admin", a.URL}, c.args...)...)
		if code != exitError || out != "" || !strings.Contains(errs, c.stderr) {
			t.Errorf("top %v: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out, errs, c.stderr)
		}
	}
	if code, _, errs := runCmd(t, "", "top", "-once", "-admin", "127.0.0.1:1"); code != exitError || !strings.Contains(errs, "is admin.http set") {
		t.Errorf("no daemon: exit %d, stderr %q", code, errs)
	}
}

// view returns a view that has read topJSON and statsJSON.
func view(t *testing.T) *topView {
	t.Helper()
	a := startTopAdmin(t)
	v := &topView{base: a.URL, addr: a.URL, by: "refused", scope: "cluster", n: 20}
	r := v.fetch(v.params())
	if r.err != nil {
		t.Fatal(r.err)
	}
	v.apply(r)
	return v
}

func TestTopKeys(t *testing.T) {
	v := view(t)
	type state struct{ by, scope, policy string }
	for i, st := range []struct {
		keys string
		want state
		quit bool
	}{
		{"s", state{"served", "cluster", ""}, false},
		{"s", state{"refused", "cluster", ""}, false},
		{"c", state{"refused", "node", ""}, false},
		{"c", state{"refused", "cluster", ""}, false},
		{"p", state{"refused", "cluster", "default"}, false}, // statsJSON has one policy
		{"p", state{"refused", "cluster", ""}, false},
		{"/log\x7f\x7fogin\r", state{"refused", "cluster", "login"}, false},
		{"/xq\x1b", state{"refused", "cluster", "login"}, false}, // Esc cancels; q was typed
		{"/\x15\r", state{"refused", "cluster", ""}, false},      // ^U empties: all
		{"x", state{"refused", "cluster", ""}, false},
		{"q", state{"refused", "cluster", ""}, true},
		{"/ab\x03", state{"refused", "cluster", ""}, true}, // ^C quits even when typing
	} {
		quit := false
		for _, k := range []byte(st.keys) {
			if quit = v.key(k); quit {
				break
			}
		}
		if got := (state{v.by, v.scope, v.policy}); got != st.want || quit != st.quit {
			t.Errorf("step %d: keys %q: %+v quit %v, want %+v quit %v", i, st.keys, got, quit, st.want, st.quit)
		}
	}
}

// Escape sequences (arrows, function keys) are not keys, even split
// across reads; a lone Esc is.
func TestTopKeySequences(t *testing.T) {
	v := &topView{}
	for i, st := range []struct{ read, keys string }{
		{"s", "s"},
		{"\x1b[A\x1bOPq", "q"},
		{"\x1b", "\x1b"},
		{"a\x1b[1;5", "a"},
		{"Cc", "c"},
		{"\x1bx", "\x1bx"},
	} {
		if got := string(v.keys([]byte(st.read))); got != st.keys {
			t.Errorf("step %d: read %q: keys %q, want %q", i, st.read, got, st.keys)
		}
	}
}

// On a small terminal no line is wider than the terminal nor are there
// more lines than it has, and no byte of a tag reaches it unescaped.
func TestTopFrameFits(t *testing.T) {
	v := view(t)
	v.updated = time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)
	for _, size := range [][2]int{{120, 40}, {50, 10}, {30, 6}, {10, 3}, {1, 1}} {
		w, h := size[0], size[1]
		lines := v.frame(v.updated, w, h, true)
		if len(lines) > h || lines[len(lines)-1] != clip(topHelp, w) {
			t.Errorf("%dx%d: %d lines, the last %q", w, h, len(lines), lines[len(lines)-1])
		}
		for _, l := range lines {
			if n := utf8.RuneCountInString(l); n > w {
				t.Errorf("%dx%d: line of %d columns: %q", w, h, n, l)
			}
			if strings.ContainsFunc(l, func(r rune) bool { return r < ' ' || r == 0x7f }) {
				t.Errorf("%dx%d: control character in %q", w, h, l)
			}
		}
	}
	lines := v.frame(v.updated, 50, 10, true)
	want := []string{
		"dthrottle top: most refused tags, cluster (3 node…",
		"decisions 100 since start, refusals 10 (10.0%), 2…",
		"updated 01:00:00 from " + v.addr, // 127.0.0.1:PORT
		"",
		"REFUSED  ±ERROR   SHARE  POLICY   TAG",
		`    500       0   50.0%  default  "10.0.0.1"`,
		`    150       1   75.0%  login    "login:<script>"`,
		`     90       4    9.0%  default  "\x1b[2J\x1b]0;…`,
		topHelp[:49] + "…",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("50x10:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

// Rates come from two answers of /v1/stats, over the daemon's uptime.
func TestTopRates(t *testing.T) {
	v := &topView{by: "refused", scope: "cluster"}
	p := v.params()
	v.apply(topResult{p: p, stats: api.Stats{UptimeSeconds: 10, Queries: api.Queries{OK: 90, NO: 10}}})
	v.apply(topResult{p: p, stats: api.Stats{UptimeSeconds: 12, Queries: api.Queries{OK: 110, NO: 30}, Tags: 5}})
	if got, want := v.rates(), "decisions 20/s, refusals 10/s (50.0%), gossip off, 5 tags tracked"; got != want {
		t.Errorf("rates %q, want %q", got, want)
	}
	// The daemon restarted: totals again.
	v.apply(topResult{p: p, stats: api.Stats{UptimeSeconds: 1, Queries: api.Queries{OK: 3}}})
	if got, want := v.rates(), "decisions 3 since start, refusals 0 (0.0%), gossip off, 0 tags tracked"; got != want {
		t.Errorf("rates %q, want %q", got, want)
	}
	// An answer to a query no longer shown is dropped.
	v.by = "served"
	v.apply(topResult{p: p, err: http.ErrHandlerTimeout})
	if v.err != nil {
		t.Errorf("a stale answer was applied: %v", v.err)
	}
}

// A tag the daemon escaped reads back into its bytes before it is
// quoted: the byte and the text never look alike.
func TestQuotedTag(t *testing.T) {
	for _, tc := range []struct {
		tag  api.TopTag
		want string
	}{
		{api.TopTag{Tag: `\x1b`}, `"\\x1b"`},
		{api.TopTag{Tag: "\x1b"}, `"\x1b"`},
		{api.TopTag{Tag: `a\xff\\x`, Escaped: true}, `"a\xff\\x"`},
		{api.TopTag{Tag: `\xzz\x`, Escaped: true}, `"\\xzz\\x"`},
	} {
		if got := quotedTag(tc.tag); got != tc.want {
			t.Errorf("quotedTag(%+v) = %s, want %s", tc.tag, got, tc.want)
		}
	}
}
