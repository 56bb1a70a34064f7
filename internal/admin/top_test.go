package admin

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/dthrottle/dthrottle/api"
)

// fakeTop is a Sources.Top that records its calls and answers every
// policy with 7 tags, whatever it is asked, so that the tests see the
// server hold the answer to the request.
type fakeTop struct {
	mu    sync.Mutex
	calls []string
	doc   api.Top
}

func newFakeTop() *fakeTop {
	tags := func(prefix string) []api.TopTag {
		var ts []api.TopTag
		for i := range 7 {
			ts = append(ts, api.TopTag{Tag: fmt.Sprintf("%s%d", prefix, i), Count: uint64(100 - i), Error: uint64(i)})
		}
		return ts
	}
	return &fakeTop{doc: api.Top{WindowSeconds: 60, Nodes: 3, Policies: []api.TopPolicy{
		{Policy: "default", Total: 1000, Bound: 4, Tags: tags("10.0.0.")},
		{Policy: "login", Total: 50, Bound: 0, Tags: []api.TopTag{
			{Tag: "<script>alert(1)</script>", Count: 30},
			{Tag: "login:\xff\xfe", Count: 20, Error: 1},
		}},
		{Policy: "quiet", Tags: nil},
	}}}
}

func (f *fakeTop) top(by, scope, policy string, n int) api.Top {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("%s %s %q %d", by, scope, policy, n))
	doc := f.doc
	doc.Policies = slices.Clone(doc.Policies)
	doc.By, doc.Scope = "wrong", "wrong" // the server says what was asked
	return doc
}

func (f *fakeTop) called() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func TestTop(t *testing.T) {
	for _, c := range []struct {
		target string
		call   string
		body   string
	}{
		{"/v1/top", `refused cluster "" 20`,
			`{"by":"refused","scope":"cluster","window_seconds":60,"nodes":3,"policies":[` +
				`{"policy":"default","total":1000,"bound":4,"tags":[{"tag":"10.0.0.0","count":100,"error":0},{"tag":"10.0.0.1","count":99,"error":1},{"tag":"10.0.0.2","count":98,"error":2},{"tag":"10.0.0.3","count":97,"error":3},{"tag":"10.0.0.4","count":96,"error":4},{"tag":"10.0.0.5","count":95,"error":5},{"tag":"10.0.0.6","count":94,"error":6}]},` +
				`{"policy":"login","total":50,"bound":0,"tags":[{"tag":"\u003cscript\u003ealert(1)\u003c/script\u003e","count":30,"error":0},{"tag":"login:\\xff\\xfe","escaped":true,"count":20,"error":1}]},` +
				`{"policy":"quiet","total":0,"bound":0,"tags":[]}]}`},
		{"/v1/top?by=served&scope=node&n=2", `served node "" 2`,
			`{"by":"served","scope":"node","window_seconds":60,"nodes":3,"policies":[` +
				`{"policy":"default","total":1000,"bound":4,"tags":[{"tag":"10.0.0.0","count":100,"error":0},{"tag":"10.0.0.1","count":99,"error":1}]},` +
				`{"policy":"login","total":50,"bound":0,"tags":[{"tag":"\u003cscript\u003ealert(1)\u003c/script\u003e","count":30,"error":0},{"tag":"login:\\xff\\xfe","escaped":true,"count":20,"error":1}]},` +
				`{"policy":"quiet","total":0,"bound":0,"tags":[]}]}`},
		{"/v1/top?policy=default&n=1&by=refused&scope=cluster", `refused cluster "default" 1`,
			`{"by":"refused","scope":"cluster","window_seconds":60,"nodes":3,"policies":[` +
				`{"policy":"default","total":1000,"bound":4,"tags":[{"tag":"10.0.0.0","count":100,"error":0}]}]}`},
		{"/v1/top?policy=&n=100", `refused cluster "" 100`, ""},
	} {
		ft := newFakeTop()
		src := newFake().sources()
		src.Top = ft.top
		res, body := do(t, handler(t, src), http.MethodGet, c.target)
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/json" {
			t.Errorf("GET %s: %d %s %s", c.target, res.StatusCode, res.Header.Get("Content-Type"), body)
		}
		if c.body != "" && body != c.body+"\n" {
			t.Errorf("GET %s:\n%s\nwant\n%s", c.target, body, c.body)
		}
		if got := ft.called(); !slices.Equal(got, []string{c.call}) {
			t.Errorf("GET %s: Top called %q, want %q", c.target, got, c.call)
		}
	}
}

func TestTopBadRequests(t *testing.T) {
	ft := newFakeTop()
	src := newFake().sources()
	src.Top = ft.top
	h := handler(t, src)
	for _, c := range []struct{ query, err string }{
		{"by=refusals", `by=\"refusals\": want refused or served`},
		{"by=", `by=\"\": want refused or served`},
		{"scope=world", `scope=\"world\": want cluster or node`},
		{"n=0", `n=\"0\": want a whole number from 1 to 100`},
		{"n=101", `n=\"101\": want a whole number from 1 to 100`},
		{"n=-1", `n=\"-1\": want a whole number from 1 to 100`},
		{"n=2.5", `n=\"2.5\": want a whole number from 1 to 100`},
		{"n=", `n=\"\": want a whole number from 1 to 100`},
		{"policy=nope", `policy=\"nope\": no such policy`},
		{"sort=served", `unknown parameter \"sort\": want by, scope, policy or n`},
		{"by=refused&by=served", `parameter by given 2 times`},
		{"n=5&zzz=1&aaa=1", `unknown parameter \"aaa\": want by, scope, policy or n`},
	} {
		res, body := do(t, h, http.MethodGet, "/v1/top?"+c.query)
		if want := `{"error":"` + c.err + `"}` + "\n"; res.StatusCode != 400 || body != want {
			t.Errorf("GET /v1/top?%s: %d %s, want 400 %s", c.query, res.StatusCode, body, want)
		}
	}
	if got := ft.called(); len(got) != 0 {
		t.Errorf("Top called for bad requests: %q", got)
	}
}

// Without Sources.Top, /v1/top answers a document with no policies.
func TestTopWithoutSource(t *testing.T) {
	h := handler(t, newFake().sources())
	for target, want := range map[string]string{
		"/v1/top":                  `{"by":"refused","scope":"cluster","window_seconds":0,"nodes":0,"policies":[]}`,
		"/v1/top?by=served&n=3":    `{"by":"served","scope":"cluster","window_seconds":0,"nodes":0,"policies":[]}`,
		"/v1/top?scope=node":       `{"by":"refused","scope":"node","window_seconds":0,"nodes":0,"policies":[]}`,
		"/v1/top?policy=login&n=1": `{"by":"refused","scope":"cluster","window_seconds":0,"nodes":0,"policies":[]}`,
	} {
		if res, body := do(t, h, http.MethodGet, target); res.StatusCode != 200 || body != want+"\n" {
			t.Errorf("GET %s: %d %s, want 200 %s", target, res.StatusCode, body, want)
		}
	}
	if res, body := do(t, h, http.MethodGet, "/v1/top?n=1000"); res.StatusCode != 400 {
		t.Errorf("GET /v1/top?n=1000 without Top: %d %s, want 400", res.StatusCode, body)
	}
	if res, _ := do(t, h, http.MethodHead, "/v1/top"); res.StatusCode != 200 {
		t.Errorf("HEAD /v1/top: %d", res.StatusCode)
	}
}
