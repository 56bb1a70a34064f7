package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

func TestDefaultValidates(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	if c.Gossip.Group != "" || len(c.Gossip.Peers) != 0 || c.Listen.TCP != "" || c.Admin.HTTP != "" {
		t.Errorf("Default() reaches beyond the host: %+v", c)
	}
	if got := c.UnixModeBits(); got != 0o660 {
		t.Errorf("UnixModeBits() = %o, want 660", got)
	}
}

func TestDefaultValues(t *testing.T) {
	want := Config{
		Listen:     Listen{Unix: DefaultUnixPath(), UnixMode: "0660", MaxConns: 10000, ShareTable: true, MaxTagBytes: 256},
		Limit:      Limit{Rate: 1, Burst: 10, Quotas: "any", MaxTags: 1000000},
		Gossip:     Gossip{Interval: Duration{time.Second}, TTL: 1, Bind: ":7777", MaxPacket: 1400, WarmStart: true, MaxPeers: 1000, Partition: "whole", ForgetAfter: Duration{time.Minute}},
		Relay:      Relay{Mode: "off", Hold: 0.5, Bind: ":7778"},
		HTTP:       HTTP{MaxConns: 1024, RefuseStatus: 403},
		SPOE:       SPOE{MaxConns: 1024},
		RLS:        RLS{MaxConns: 1024, MaxRequests: 1024, Unmatched: "limit", ChargeKey: "dthrottle_charge"},
		Gubernator: Gubernator{MaxConns: 1024, MaxRequests: 1024},
		Log:        Log{Format: "text", Level: "info"},
	}
	if got := Default(); !reflect.DeepEqual(got, want) {
		t.Errorf("Default() =\n%+v\nwant\n%+v", got, want)
	}
}

func TestDefaultUnixPath(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	fallback := filepath.Join(os.TempDir(), "dthrottle-"+strconv.Itoa(os.Getuid())+".sock")
	for _, tc := range []struct{ xdg, want string }{
		{dir, filepath.Join(dir, "dthrottle.sock")},
		{"", fallback},
		{file, fallback},                     // not a directory
		{filepath.Join(dir, "no"), fallback}, // missing
		{"relative", fallback},
	} {
		t.Setenv("XDG_RUNTIME_DIR", tc.xdg)
		if got := DefaultUnixPath(); got != tc.want {
			t.Errorf("XDG_RUNTIME_DIR=%q: DefaultUnixPath() = %q, want %q", tc.xdg, got, tc.want)
		}
	}
}

func TestShippedExample(t *testing.T) {
	c, err := Load("../../dthrottle.toml")
	if err != nil {
		t.Fatalf("Load(../dthrottle.toml): %v", err)
	}
	want := Config{
		Listen: Listen{Unix: "/run/dthrottle/dthrottle.sock", UnixMode: "0660", MaxConns: 10000, ShareTable: true, MaxTagBytes: 256},
		Limit:  Limit{Rate: 1, Burst: 10, Quotas: "any", MaxTags: 1000000},
		Policy: []Policy{
			{Name: "login", Prefix: "login:", Rate: 0.2, Burst: 5, Quotas: "any", Action: ActionLimit},
			{Name: "api", Prefix: "key:", Limit: 1000, Per: Duration{24 * time.Hour}, Quotas: "lower", Action: ActionLimit},
			{Name: "healthcheck", Prefix: "health:", Quotas: "any", Action: ActionAllow},
		},
		Gossip: Gossip{
			Interval: Duration{time.Second}, Group: "239.255.77.77:7777", TTL: 1,
			Peers: []string{}, Bind: ":7777", MaxPacket: 1400, WarmStart: true, MaxPeers: 1000,
			Partition: "whole", ForgetAfter: Duration{time.Minute},
		},
		Relay:      Relay{Mode: "off", Hold: 0.5, Peers: []string{}, Bind: ":7778"},
		Admin:      Admin{HTTP: "127.0.0.1:7071"},
		HTTP:       HTTP{MaxConns: 1024, RefuseStatus: 403},
		SPOE:       SPOE{MaxConns: 1024},
		RLS:        RLS{MaxConns: 1024, MaxRequests: 1024, Unmatched: "limit", ChargeKey: "dthrottle_charge"},
		Gubernator: Gubernator{MaxConns: 1024, MaxRequests: 1024},
		Log:        Log{Format: "text", Level: "info"},
		State:      State{File: "/var/lib/dthrottle/state"},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("Load(../dthrottle.toml) =\n%+v\nwant\n%+v", c, want)
	}
}

// TestShippedExampleComplete checks that the reference file sets every key,
// so that it documents every key.
func TestShippedExampleComplete(t *testing.T) {
	data, err := os.ReadFile("../../dthrottle.toml")
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	md, err := toml.Decode(string(data), &raw)
	if err != nil {
		t.Fatal(err)
	}
	// [limit] gives its rate as rate or as limit with per, never both:
	// the second way is shown commented out.
	commented := map[string]bool{"limit.limit": true, "limit.per": true}
	for _, k := range schema {
		last := k.path[len(k.path)-1]
		switch {
		case commented[k.name]:
			if md.IsDefined(k.path...) || !strings.Contains(string(data), "\n# "+last+" = ") {
				t.Errorf("../../dthrottle.toml does not show %s commented out", k.name)
			}
		case !md.IsDefined(k.path...) && k.path[0] != "policy":
			t.Errorf("../../dthrottle.toml does not set %s", k.name)
		}
	}
	for _, f := range []string{"name", "prefix", "rate", "burst", "limit", "per", "quotas", "action", "dry_run"} {
		if !strings.Contains(string(data), "\n"+f+" = ") {
			t.Errorf("../../dthrottle.toml has no example of policy key %s", f)
		}
	}
}

func TestParseEmptyIsDefault(t *testing.T) {
	for _, src := range []string{"", "# nothing\n", "[listen]\n[limit]\n[gossip]\n[admin]\n"} {
		c, err := Parse([]byte(src))
		if err != nil {
			t.Fatalf("Parse(%q): %v", src, err)
		}
		if !reflect.DeepEqual(c, Default()) {
			t.Errorf("Parse(%q) = %+v, want Default() %+v", src, c, Default())
		}
	}
}

func TestParseKeepsDefaults(t *testing.T) {
	c, err := Parse([]byte("[limit]\nrate = 5\n[gossip]\npeers = [\"10.0.0.2:7777\", \"[::1]:7777\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Limit.Rate = 5
	want.Gossip.Peers = []string{"10.0.0.2:7777", "[::1]:7777"}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got %+v\nwant %+v", c, want)
	}
}

// parseErr parses src and returns the error text, failing the test if there
// is none.
func parseErr(t *testing.T, src string) string {
	t.Helper()
	_, err := Parse([]byte(src))
	if err == nil {
		t.Fatalf("Parse(%q) succeeded, want an error", src)
	}
	if _, ok := errors.AsType[*Error](err); !ok {
		t.Errorf("Parse(%q) error %T is not *Error", src, err)
	}
	return err.Error()
}

func TestUnknownKeys(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"[limit]\nrate = 1\nbrust = 3\n", `config: line 3: unknown key "limit.brust" (did you mean "limit.burst"?)`},
		{"[listen]\nunix = \"/tmp/x\"\n\n[listn]\ntcp = \":1\"\n", `config: line 4: unknown key "listn" (did you mean "listen"?)`},
		{"[[policy]]\nprefix = \"a\"\nrate = 1\nburst = 1\n[[policy]]\n# c\nprefix = \"b\"\n  brust = 2\n", `config: line 8: unknown key "policy.brust" (did you mean "policy.burst"?)`},
		{"[[policy]]\nprefix = \"a\"\nrate = 1\nburst = 1\naction = \"deny\"\nlimits = 3\n", `config: line 6: unknown key "policy.limits" (did you mean "policy.limit"?)`},
		{"rate = 1\n", `config: line 1: unknown key "rate" (did you mean "limit.rate"?)`},
		{"[limit]\nRATE = 2\n", `config: line 2: unknown key "limit.RATE" (did you mean "limit.rate"?)`},
		{"limit.brust = 3\n", `config: line 1: unknown key "limit.brust" (did you mean "limit.burst"?)`},
		{"[limit]\n\"brust\" = 3\n", `config: line 2: unknown key "limit.brust"`},
		{"[gossip]\npeers = [\n  \"a:1\",\n]\nbind2 = \":1\"\n", `config: line 5: unknown key "gossip.bind2"`},
		{"[admin]\nnote = \"\"\"\nhttps = 1\n\"\"\"\n", `config: line 2: unknown key "admin.note"`},
		{"[admin]\nhttp = \"\"\nnote = '''\nx\n'''\n", `config: line 3: unknown key "admin.note"`},
		{"[limit.extra]\nx = 1\n", `config: line 1: unknown key "limit.extra"`},
		{"policy = [{prefix = \"a\", rate = 1, burst = 1, bad = 1}]\n", `config: unknown key "policy.bad"`}, // no line: inline
		{"[foo]\n", `config: line 1: unknown key "foo"`},
	} {
		got := parseErr(t, tc.src)
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("Parse(%q):\n got %s\nwant %s", tc.src, got, tc.want)
		}
	}
}

func TestLoadNamesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dthrottle.toml")
	if err := os.WriteFile(path, []byte("[limit]\nrate = 1\nbrust = 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	want := "config: " + path + `:3: unknown key "limit.brust"`
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Load: %v, want %s", err, want)
	}
	if e, ok := errors.AsType[*Error](err); !ok || e.File != path || e.Line != 3 || e.Key != "limit.brust" {
		t.Errorf("Load: error %#v", err)
	}

	_, err = Load(filepath.Join(t.TempDir(), "missing.toml"))
	if !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "config: ") {
		t.Errorf("Load(missing) = %v, want config: ... fs.ErrNotExist", err)
	}
}

func TestSyntaxError(t *testing.T) {
	_, err := Parse([]byte("[limit]\nrate = 1\nburst = \n"))
	e, ok := errors.AsType[*Error](err)
	if !ok || e.Line != 3 || !strings.HasPrefix(e.Error(), "config: line 3: invalid toml") {
		t.Fatalf("got %v, want config: line 3: invalid toml ...", err)
	}
	if _, ok := errors.AsType[toml.ParseError](err); !ok {
		t.Errorf("error does not wrap toml.ParseError: %#v", err)
	}
}

func TestWrongTypes(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"[limit]\nrate = \"fast\"\n", `config: line 2: limit.rate: must be a number, not a string`},
		{"[limit]\nburst = 1.5\n", `config: line 2: limit.burst: must be an integer, not a float`},
		{"[limit]\nrate = 9007199254740993\n", `config: line 2: limit.rate = 9007199254740993: too large`},
		{"[listen]\nunix_mode = 0o660\n", `config: line 2: listen.unix_mode: must be a string, not an integer`},
		{"[gossip]\npeers = [\"a:1\", 2]\n", `config: line 2: gossip.peers[2]: must be a string, not an integer`},
		{"[gossip]\npeers = \"a:1\"\n", `config: line 2: gossip.peers: must be an array of strings, not a string`},
		{"listen = 3\n", `config: line 1: listen: must be a table, not an integer`},
		{"[[limit]]\nrate = 1\n", `config: line 1: limit: must be a table, not an array`},
		{"[policy]\nprefix = \"a\"\n", `config: line 1: policy: must be an array of tables, not a table`},
		{"[[policy]]\nprefix = \"a\"\n[[policy]]\nprefix = 7\n", `config: line 4: policy[2].prefix: must be a string, not an integer`},
		{"[admin]\nhttp = true\n", `config: line 2: admin.http: must be a string, not a boolean`},
		{"[admin]\npprof = \"yes\"\n", `config: line 2: admin.pprof: must be true or false, not a string`},
		{"[listen]\nunix = 1979-05-27\n", `config: line 2: listen.unix: must be a string, not a date or time`},
	} {
		if got := parseErr(t, tc.src); got != tc.want {
			t.Errorf("Parse(%q):\n got %s\nwant %s", tc.src, got, tc.want)
		}
	}
}

func TestDurations(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  time.Duration // 0: an error containing errText
		err   string
	}{
		{`"1s"`, time.Second, ""},
		{`"250ms"`, 250 * time.Millisecond, ""},
		{`"1m30s"`, 90 * time.Second, ""},
		{`"1 sec"`, 0, `config: line 2: gossip.interval = "1 sec": must be a duration string such as "1s" or "250ms"`},
		{`5`, 0, `config: line 2: gossip.interval: must be a duration string such as "1s" or "250ms", not an integer`},
		{`"5"`, 0, `config: line 2: gossip.interval = "5": must be a duration string such as "1s" or "250ms"`},
		{`1.5`, 0, `config: line 2: gossip.interval: must be a duration string such as "1s" or "250ms", not a float`},
		{`""`, 0, `config: line 2: gossip.interval = "": must be a duration string`},
	} {
		src := "[gossip]\ninterval = " + tc.value + "\n"
		c, err := Parse([]byte(src))
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("interval = %s: %v", tc.value, err)
		case tc.err == "" && c.Gossip.Interval.Duration != tc.want:
			t.Errorf("interval = %s: got %v, want %v", tc.value, c.Gossip.Interval, tc.want)
		case tc.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.err)):
			t.Errorf("interval = %s: got error %v, want %s", tc.value, err, tc.err)
		}
	}

	var d Duration
	if err := d.UnmarshalText([]byte("1 sec")); err == nil || !strings.Contains(err.Error(), `"1s" or "250ms"`) {
		t.Errorf(`UnmarshalText("1 sec") = %v`, err)
	}
	if err := d.UnmarshalText([]byte("1h2m")); err != nil || d.Duration != time.Hour+2*time.Minute {
		t.Errorf(`UnmarshalText("1h2m") = %v, %v`, d, err)
	}
	if b, err := d.MarshalText(); err != nil || string(b) != "1h2m0s" {
		t.Errorf("MarshalText() = %q, %v", b, err)
	}
}

func TestPolicies(t *testing.T) {
	const head = "[[policy]]\nname = \"login\"\nprefix = \"login:\"\nrate = 0.2\nburst = 5\n"
	for _, tc := range []struct{ src, want string }{
		{head + "[[policy]]\nprefix = \"login:\"\naction = \"deny\"\n",
			`config: line 7: policy[2] (login:).prefix = "login:": must be unique: policy[1] has it too`},
		{head + "[[policy]]\nname = \"login\"\nprefix = \"x\"\naction = \"allow\"\n",
			`config: line 7: policy[2] (login).name = "login": must be unique: policy[1] has it too`},
		{head + "[[policy]]\nprefix = \"login\"\naction = \"allow\"\n[[policy]]\nprefix = \"b\"\nname = \"login\"\naction = \"deny\"\n",
			`config: line 6: policy[2] (login).name = "login": must be unique: policy[1] has it too`}, // name defaults to the prefix; line of the header
		{"[[policy]]\nname = \"y:\"\nprefix = \"x\"\naction = \"allow\"\n[[policy]]\nprefix = \"x:\"\naction = \"deny\"\n[[policy]]\nprefix = \"y:\"\n",
			`config: line 8: policy[3] (y:).name = "y:": must be unique: policy[1] has it too`},
		{head + "action = \"throttle\"\n",
			`config: line 6: policy[1] (login).action = "throttle": must be one of "limit", "allow", "deny"`},
		{"[[policy]]\nname = \"n\"\nrate = 1\nburst = 1\n",
			`config: line 1: policy[1] (n).prefix = "": must not be empty`},
		{"[[policy]]\nprefix = \"a\\nb\"\naction = \"deny\"\n",
			`config: line 2: policy[1] (a` + "\n" + `b).prefix = "a\nb": must not contain a newline`},
		{"[[policy]]\nprefix = \"p:\"\nburst = 3\n",
			`config: line 1: policy[1] (p:).rate = 0: must be between 0.000001 and 1e9`}, // omitted rate: line of the header
		{"[[policy]]\nname = \"login\"\nprefix = \"login:\"\nrate = 0.2\nburst = -1\n",
			`config: line 5: policy[1] (login).burst = -1: must be between 1 and 1000000`},
	} {
		got := parseErr(t, tc.src)
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("Parse(%q):\n got %s\nwant %s", tc.src, got, tc.want)
		}
	}
}

func TestPolicyDefaults(t *testing.T) {
	c, err := Parse([]byte("[[policy]]\nprefix = \"a:\"\nrate = 2\nburst = 3\n[[policy]]\nprefix = \"ok:\"\naction = \"allow\"\n[[policy]]\nname = \"bad\"\nprefix = \"bad:\"\naction = \"deny\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Policy{
		{Name: "a:", Prefix: "a:", Rate: 2, Burst: 3, Quotas: "any", Action: ActionLimit},
		{Name: "ok:", Prefix: "ok:", Quotas: "any", Action: ActionAllow},
		{Name: "bad", Prefix: "bad:", Quotas: "any", Action: ActionDeny},
	}
	if !reflect.DeepEqual(c.Policy, want) {
		t.Errorf("policies = %+v\nwant %+v", c.Policy, want)
	}
}
