package caddydthrottle

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

func TestUnmarshalCaddyfile(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Handler
	}{
		{`dthrottle {remote_host}`, Handler{Tag: "{remote_host}"}},
		{`dthrottle api:{header.X-Api-Key} {
			socket /run/x.sock
			fail closed
			status 503
			timeout 20ms
		}`, Handler{Tag: "api:{header.X-Api-Key}", Socket: "/run/x.sock", Fail: "closed", Status: 503, Timeout: caddy.Duration(20 * time.Millisecond)}},
		{`dthrottle "a b" {
			fail open
		}`, Handler{Tag: "a b", Fail: "open"}},
		{`dthrottle global {
		}`, Handler{Tag: "global"}},
	} {
		var h Handler
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.in)); err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if h != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.in, h, tc.want)
		}
	}
}

func TestUnmarshalCaddyfileErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`dthrottle`, "a tag is required"},
		{`dthrottle ""`, "the tag is empty"},
		{`dthrottle a b`, "wrong argument count"},
		{"dthrottle a {\n bogus x\n}", `unknown subdirective "bogus"`},
		{"dthrottle a {\n socket\n}", "wrong argument count"},
		{"dthrottle a {\n socket x y\n}", "wrong argument count"},
		{"dthrottle a {\n socket x\n socket y\n}", "socket given twice"},
		{"dthrottle a {\n fail maybe\n}", `fail "maybe": must be open or closed`},
		{"dthrottle a {\n status 200\n}", "from 400 to 599"},
		{"dthrottle a {\n status 600\n}", "from 400 to 599"},
		{"dthrottle a {\n status many\n}", "from 400 to 599"},
		{"dthrottle a {\n timeout soon\n}", "must be a duration"},
		{"dthrottle a {\n timeout 0\n}", "must be a duration"},
		{"dthrottle a {\n timeout -1s\n}", "must be a duration"},
	} {
		var h Handler
		err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one saying %q", tc.in, err, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		h    Handler
		want string // "" for valid
	}{
		{Handler{Tag: "{http.request.remote.host}"}, ""},
		{Handler{Tag: "x", Fail: "closed", Status: 503}, ""},
		{Handler{}, "no tag"},
		{Handler{Tag: "x", Fail: "shut"}, "must be open or closed"},
		{Handler{Tag: "x", Status: 302}, "from 400 to 599"},
		{Handler{Tag: "x", Timeout: -1}, "must not be negative"},
	} {
		err := tc.h.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.h, err, tc.want)
		}
	}
}

// adapt turns a whole Caddyfile into Caddy's JSON.
func adapt(t *testing.T, file string) (string, error) {
	t.Helper()
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(file), map[string]any{"filename": "Caddyfile"})
	return string(out), err
}

// routeHandlers returns the handler names of the first server's routes,
// in order, each route's subroutes flattened.
func routeHandlers(t *testing.T, cfg string) []string {
	t.Helper()
	var c struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Routes []json.RawMessage
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(cfg), &c); err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(raw json.RawMessage)
	walk = func(raw json.RawMessage) {
		var r struct {
			Handle []struct {
				Handler string
				Routes  []json.RawMessage
			}
		}
		json.Unmarshal(raw, &r)
		for _, h := range r.Handle {
			out = append(out, h.Handler)
			for _, sub := range h.Routes {
				walk(sub)
			}
		}
	}
	for _, s := range c.Apps.HTTP.Servers {
		for _, r := range s.Routes {
			walk(r)
		}
	}
	return out
}

// TestAdaptOrder: outside a route the directive has its place, before
// authentication and the handlers that answer; the Caddyfile's
// placeholder shorthands become Caddy's.
func TestAdaptOrder(t *testing.T) {
	cfg, err := adapt(t, `:8080 {
	file_server
	basic_auth {
		u $2a$14$Zkx19XLiW6VYouLHR5NmfOFU0z2GTNmpkT/5qqR7hx4IjWJPDhjvG
	}
	dthrottle api:{header.X-Api-Key} {
		socket /tmp/d.sock
	}
}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(routeHandlers(t, cfg), " "); got != "dthrottle authentication file_server" {
		t.Errorf("handlers in order: %s\n%s", got, cfg)
	}
	if !strings.Contains(cfg, `"tag":"api:{http.request.header.X-Api-Key}"`) {
		t.Errorf("the tag's shorthand is not expanded:\n%s", cfg)
	}

	cfg, err = adapt(t, ":8080 {\n\tdthrottle {remote_host}\n\trespond hello\n}\n")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cfg, `{"handler":"dthrottle","tag":"{http.request.remote.host}"}`) {
		t.Errorf("defaults are not left out of the JSON:\n%s", cfg)
	}
}

func TestAdaptErrors(t *testing.T) {
	_, err := adapt(t, ":8080 {\n\tdthrottle {remote_host} {\n\t\tsockets /tmp/d.sock\n\t}\n\trespond hello\n}\n")
	if err == nil || !strings.Contains(err.Error(), `unknown subdirective "sockets"`) || !strings.Contains(err.Error(), "Caddyfile:3") {
		t.Errorf("an unknown subdirective: %v, want it named with its line", err)
	}
}
