package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The rate limit service's reference implementation, whose client asks
// dthrottled here and whose server bench/rls.sh measures beside it. It
// has no tagged release: one pseudo-version is pinned, here and in
// bench/rls.sh, and built from the Go module proxy's copy of its source
// (go mod download gives the directory; building in a writable copy of it
// honours its own go.mod and go.sum).
const (
	rlsRefModule  = "github.com/envoyproxy/ratelimit"
	rlsRefVersion = "v1.4.1-0.20260122083618-3fb702589d36"
)

var (
	rlsRefOnce sync.Once
	rlsRefDir  string
	rlsRefErr  error
)

// rlsReference returns the directory holding the reference's server
// (service_cmd) and client (client_cmd), building them the first time into
// the user's cache directory, where later runs find them. A failed build,
// such as one without the module proxy, skips the test, or fails it under
// CI=true.
func rlsReference(t *testing.T) string {
	t.Helper()
	rlsRefOnce.Do(func() { rlsRefDir, rlsRefErr = buildRLSReference() })
	if rlsRefErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("building %s@%s is required under CI=true: %v", rlsRefModule, rlsRefVersion, rlsRefErr)
		}
		t.Skipf("cannot build %s@%s: %v", rlsRefModule, rlsRefVersion, rlsRefErr)
	}
	return rlsRefDir
}

// rlsRefCache is where the built binaries are kept:
// $XDG_CACHE_HOME/dthrottle-rls-ref/VERSION, else ~/.cache/..., else the
// temporary directory's. bench/rls.sh uses the same place.
func rlsRefCache() string {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "dthrottle-rls-ref", rlsRefVersion)
}

func buildRLSReference() (string, error) {
	dir := rlsRefCache()
	if fileExists(filepath.Join(dir, "service_cmd")) && fileExists(filepath.Join(dir, "client_cmd")) {
		return dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	work, err := os.MkdirTemp(filepath.Dir(dir), "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false")

	// go mod download, outside any module, prints where the source is.
	dl := exec.Command("go", "mod", "download", "-json", rlsRefModule+"@"+rlsRefVersion)
	dl.Dir, dl.Env = work, env
	out, err := dl.Output()
	var mod struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &mod); jerr != nil || mod.Error != "" || err != nil {
		return "", fmt.Errorf("go mod download: %v %s %s", err, mod.Error, exitStderr(err))
	}
	// The module cache is read-only: build in a copy.
	src := filepath.Join(work, "src")
	if err := os.CopyFS(src, os.DirFS(mod.Dir)); err != nil {
		return "", fmt.Errorf("copying %s: %w", mod.Dir, err)
	}
	bin := filepath.Join(work, "bin")
	build := exec.Command("go", "build", "-trimpath", "-o", bin+"/", "./src/service_cmd", "./src/client_cmd")
	build.Dir, build.Env = src, env
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	// Another run may have finished first: then its binaries serve.
	if err := os.Rename(bin, dir); err != nil && !fileExists(filepath.Join(dir, "client_cmd")) {
		return "", err
	}
	return dir, nil
}

func exitStderr(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}

// rlsConfig serves the rate limit service on a TCP port the test picks.
// Every descriptor becomes the tag rls:<domain>|<key>=<value>|..., so the
// policies below are prefixes of such tags. Each limit is one a rate limit
// reply can state exactly: burst b refilled at b per minute, b per MINUTE.
const rlsConfig = `
[listen]
unix = "%SOCK%"
[limit]
rate = 1
burst = 60
[[policy]]
name = "upload"
prefix = "rls:api|generic_key=upload"
rate = 0.05
burst = 3
[[policy]]
name = "per-user"
prefix = "rls:api|generic_key=upload|user="
rate = 0.016666666666666666
burst = 1
[[policy]]
name = "escaped"
prefix = "rls:api|path=/a%7Cb%25c"
rate = 0.016666666666666666
burst = 1
[[policy]]
name = "free"
prefix = "rls:api|generic_key=health"
action = "allow"
[rls]
listen = "127.0.0.1:0"
`

// requireRLS checks that this tree's dthrottled knows [rls] in config.
// Before the rls package exists the test is skipped, saying so; once it
// exists, a config it does not accept fails the test.
func requireRLS(t *testing.T, config string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "check.toml")
	config = strings.ReplaceAll(config, "%SOCK%", filepath.Join(filepath.Dir(path), "d.sock"))
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "-check", "-config", path).CombinedOutput()
	if err == nil {
		return
	}
	if strings.Contains(string(out), `unknown key "rls`) && !fileExists("../rls") {
		t.Skipf("the rate limit service is not in this tree yet (no rls package; dthrottled: %s)", bytes.TrimSpace(out))
	}
	t.Fatalf("dthrottled -check rejects the [rls] config: %v\n%s", err, out)
}

// startRLSDaemon starts dthrottled on config and returns the rate limit
// service's address once it accepts connections.
func startRLSDaemon(t *testing.T, config string) string {
	t.Helper()
	requireRLS(t, config)
	config, addr := pinPort(t, config, "listen")
	startDaemon(t, config)
	poll(t, 10*time.Second, "the rate limit service to accept on "+addr, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return addr
}

// rlsStatus is one descriptor's status in a reply.
type rlsStatus struct {
	code      string
	limit     *rlsLimit // nil when the reply states none
	remaining uint64
	reset     time.Duration
}

// rlsLimit is a reply's current_limit: perUnit requests per multiplier
// units (multiplier 0 when absent, meaning 1).
type rlsLimit struct {
	perUnit    uint64
	unit       string
	multiplier uint64
}

// perSecond is the limit's rate in requests per second.
func (l rlsLimit) perSecond(t *testing.T) float64 {
	t.Helper()
	secs := map[string]float64{"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400, "WEEK": 7 * 86400}[l.unit]
	if secs == 0 {
		t.Fatalf("current_limit unit %q", l.unit)
	}
	return float64(l.perUnit) / (secs * float64(max(l.multiplier, 1)))
}

// rlsReply is what the reference client printed.
type rlsReply struct {
	overall  string
	statuses []rlsStatus
}

// askRLS runs the reference client once against addr: one call of
// domain with one descriptor per element of descriptors (each
// "key=value,key=value").
func askRLS(t *testing.T, client, addr, domain string, descriptors ...string) rlsReply {
	t.Helper()
	args := []string{"-dial_string", addr, "-domain", domain}
	for _, d := range descriptors {
		args = append(args, "-descriptors", d)
	}
	cmd := exec.Command(client, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("client_cmd %v: %v\n%s", args, err, out.String())
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("client_cmd %v: no answer within 20s\n%s", args, out.String())
	}
	text, found := "", false
	for _, line := range strings.Split(out.String(), "\n") {
		if s, ok := strings.CutPrefix(line, "response:"); ok {
			text, found = s, true
		}
	}
	if !found {
		t.Fatalf("client_cmd %v printed no response:\n%s", args, out.String())
	}
	msg, err := parseProtoText(text)
	if err != nil {
		t.Fatalf("client_cmd %v: %v in %q", args, err, text)
	}
	return rlsReplyOf(t, msg)
}

// rlsReplyOf reads a RateLimitResponse from its text form. Fields at their
// zero value are absent from it: no limit_remaining means 0.
func rlsReplyOf(t *testing.T, m protoText) rlsReply {
	t.Helper()
	r := rlsReply{overall: m.scalar("overall_code")}
	for _, s := range m.msgs("statuses") {
		st := rlsStatus{code: s.scalar("code")}
		st.remaining = s.uint(t, "limit_remaining")
		if ls := s.msgs("current_limit"); len(ls) > 0 {
			st.limit = &rlsLimit{perUnit: ls[0].uint(t, "requests_per_unit"), unit: ls[0].scalar("unit")}
			if ms := ls[0].msgs("unit_multiplier"); len(ms) > 0 {
				st.limit.multiplier = ms[0].uint(t, "value")
			}
		}
		if ds := s.msgs("duration_until_reset"); len(ds) > 0 {
			st.reset = time.Duration(ds[0].uint(t, "seconds"))*time.Second + time.Duration(ds[0].uint(t, "nanos"))
		}
		r.statuses = append(r.statuses, st)
	}
	if r.overall == "" {
		r.overall = "UNKNOWN"
	}
	for i := range r.statuses {
		if r.statuses[i].code == "" {
			r.statuses[i].code = "UNKNOWN"
		}
	}
	return r
}

func TestRLSReferenceClientBurst(t *testing.T) {
	addr := startRLSDaemon(t, rlsConfig)
	client := filepath.Join(rlsReference(t), "client_cmd")

	// Burst 3 at 0.05 per second: three served, then refused; the
	// policy is 3 per minute, and the bucket is full again within 60 s.
	for i := 1; i <= 5; i++ {
		r := askRLS(t, client, addr, "api", "generic_key=upload")
		want := "OK"
		if i > 3 {
			want = "OVER_LIMIT"
		}
		if r.overall != want || len(r.statuses) != 1 || r.statuses[0].code != want {
			t.Fatalf("call %d: got %+v, want overall and status %s", i, r, want)
		}
		s := r.statuses[0]
		if s.limit == nil {
			t.Fatalf("call %d: no current_limit: %+v", i, r)
		}
		if got := s.limit.perSecond(t); math.Abs(got-0.05) > 1e-9 {
			t.Errorf("call %d: current_limit %d per %s (%g/s), want 0.05/s, as 3 per MINUTE", i, s.limit.perUnit, s.limit.unit, got)
		}
		if want := uint64(max(3-i, 0)); s.remaining != want {
			t.Errorf("call %d: limit_remaining %d, want %d", i, s.remaining, want)
		}
		if s.reset <= 0 || s.reset > 61*time.Second {
			t.Errorf("call %d: duration_until_reset %v, want within (0, 60s]", i, s.reset)
		}
	}
}

func TestRLSReferenceClientUnmatched(t *testing.T) {
	addr := startRLSDaemon(t, rlsConfig)
	client := filepath.Join(rlsReference(t), "client_cmd")

	// Neither generic_key=download in domain api nor generic_key=upload
	// in another domain matches the upload policy: the default limit
	// (burst 60) serves them, and an allow policy serves every call.
	for _, c := range []struct{ domain, desc string }{
		{"api", "generic_key=download"},
		{"other", "generic_key=upload"},
		{"api", "generic_key=health"},
	} {
		for i := 1; i <= 5; i++ {
			r := askRLS(t, client, addr, c.domain, c.desc)
			if r.overall != "OK" || len(r.statuses) != 1 || r.statuses[0].code != "OK" {
				t.Fatalf("%s %s call %d: got %+v, want OK", c.domain, c.desc, i, r)
			}
			if l := r.statuses[0].limit; l != nil && c.desc != "generic_key=health" {
				if got := l.perSecond(t); math.Abs(got-1) > 1e-9 {
					t.Errorf("%s %s call %d: current_limit %d per %s, want the default 1/s", c.domain, c.desc, i, l.perUnit, l.unit)
				}
			}
		}
	}
}

func TestRLSReferenceClientSeveralDescriptors(t *testing.T) {
	addr := startRLSDaemon(t, rlsConfig)
	client := filepath.Join(rlsReference(t), "client_cmd")

	// Two descriptors in one call: one status each, in order; the call is
	// over the limit when one of them is.
	for i := 1; i <= 4; i++ {
		r := askRLS(t, client, addr, "api", "generic_key=upload", "generic_key=download")
		want := "OK"
		if i > 3 {
			want = "OVER_LIMIT"
		}
		if r.overall != want || len(r.statuses) != 2 || r.statuses[0].code != want || r.statuses[1].code != "OK" {
			t.Fatalf("call %d: got %+v, want overall %s, statuses [%s OK]", i, r, want, want)
		}
	}

	// Entries of one descriptor make one tag, in order: each user has a
	// bucket of its own under the longer prefix (burst 1).
	for _, c := range []struct{ desc, want string }{
		{"generic_key=upload,user=alice", "OK"},
		{"generic_key=upload,user=alice", "OVER_LIMIT"},
		{"generic_key=upload,user=bob", "OK"},
		{"generic_key=upload,user=bob", "OVER_LIMIT"},
	} {
		if r := askRLS(t, client, addr, "api", c.desc); r.overall != c.want {
			t.Fatalf("%s: got %+v, want %s", c.desc, r, c.want)
		}
	}

	// '|' and '%' in a value are escaped in the tag (%7C, %25), so the
	// value cannot reach another descriptor's policy.
	for i, want := range []string{"OK", "OVER_LIMIT"} {
		if r := askRLS(t, client, addr, "api", "path=/a|b%c"); r.overall != want {
			t.Fatalf("path=/a|b%%c call %d: got %+v, want %s", i+1, r, want)
		}
	}
}

func TestRLSReferenceClientUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "rls.sock")
	config := strings.Replace(rlsConfig, `listen = "127.0.0.1:0"`, fmt.Sprintf("listen = %q", "unix:"+sock), 1)
	requireRLS(t, config)
	startDaemon(t, config)
	client := filepath.Join(rlsReference(t), "client_cmd")
	poll(t, 10*time.Second, "the rate limit service on "+sock, func() bool { return fileExists(sock) })
	for i, want := range []string{"OK", "OK", "OK", "OVER_LIMIT"} {
		if r := askRLS(t, client, "unix:"+sock, "api", "generic_key=upload"); r.overall != want {
			t.Fatalf("call %d: got %+v, want %s", i+1, r, want)
		}
	}
}

// protoText is a message in protobuf's text format: each field's values,
// in order, each a scalar or a message.
type protoText map[string][]protoValue

type protoValue struct {
	scalar string
	msg    protoText
}

func (m protoText) scalar(name string) string {
	for _, v := range m[name] {
		if v.msg == nil {
			return v.scalar
		}
	}
	return ""
}

func (m protoText) uint(t *testing.T, name string) uint64 {
	t.Helper()
	s := m.scalar(name)
	if s == "" {
		return 0
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("field %s: %v", name, err)
	}
	return n
}

func (m protoText) msgs(name string) []protoText {
	var out []protoText
	for _, v := range m[name] {
		if v.msg != nil {
			out = append(out, v.msg)
		}
	}
	return out
}

// parseProtoText parses what a generated message's String method prints
// (its spacing varies on purpose between builds): `name: value` and
// `name {...}` or `name: {...}`, values bare words or quoted strings.
func parseProtoText(s string) (protoText, error) {
	p := protoParser{s: s}
	m, err := p.fields()
	if err == nil && p.i < len(p.s) {
		err = fmt.Errorf("unexpected %q at %d", p.s[p.i], p.i)
	}
	return m, err
}

type protoParser struct {
	s string
	i int
}

func (p *protoParser) skip() {
	for p.i < len(p.s) && strings.IndexByte(" \t\r\n,;", p.s[p.i]) >= 0 {
		p.i++
	}
}

func (p *protoParser) word() string {
	start := p.i
	for p.i < len(p.s) && strings.IndexByte(" \t\r\n,;:{}<>\"", p.s[p.i]) < 0 {
		p.i++
	}
	return p.s[start:p.i]
}

// fields reads fields up to the end or a closing brace, left unread.
func (p *protoParser) fields() (protoText, error) {
	m := protoText{}
	for {
		p.skip()
		if p.i == len(p.s) || p.s[p.i] == '}' || p.s[p.i] == '>' {
			return m, nil
		}
		name := p.word()
		if name == "" {
			return nil, fmt.Errorf("unexpected %q at %d", p.s[p.i], p.i)
		}
		p.skip()
		if p.i < len(p.s) && p.s[p.i] == ':' {
			p.i++
			p.skip()
		}
		if p.i == len(p.s) {
			return nil, fmt.Errorf("field %s has no value", name)
		}
		switch c := p.s[p.i]; c {
		case '{', '<':
			p.i++
			sub, err := p.fields()
			if err != nil {
				return nil, err
			}
			if p.i == len(p.s) {
				return nil, fmt.Errorf("field %s: unterminated message", name)
			}
			p.i++
			m[name] = append(m[name], protoValue{msg: sub})
		case '"':
			q, err := strconv.QuotedPrefix(p.s[p.i:])
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", name, err)
			}
			p.i += len(q)
			v, _ := strconv.Unquote(q)
			m[name] = append(m[name], protoValue{scalar: v})
		default:
			v := p.word()
			if v == "" {
				return nil, fmt.Errorf("field %s: unexpected %q", name, c)
			}
			m[name] = append(m[name], protoValue{scalar: v})
		}
	}
}

func TestParseProtoText(t *testing.T) {
	for _, s := range []string{
		`overall_code:OVER_LIMIT statuses:{code:OVER_LIMIT current_limit:{requests_per_unit:3 unit:MINUTE} duration_until_reset:{seconds:20}}`,
		`overall_code: OVER_LIMIT  statuses: {code: OVER_LIMIT  current_limit: {requests_per_unit: 3  unit: MINUTE}  duration_until_reset: {seconds: 20}}`,
		"overall_code:OVER_LIMIT\nstatuses {\n code:OVER_LIMIT\n current_limit <requests_per_unit:3 unit:MINUTE name:\"a b\">\n duration_until_reset {seconds:20}\n}\n",
	} {
		m, err := parseProtoText(s)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		r := rlsReplyOf(t, m)
		want := rlsStatus{code: "OVER_LIMIT", limit: &rlsLimit{3, "MINUTE", 0}, reset: 20 * time.Second}
		if r.overall != "OVER_LIMIT" || len(r.statuses) != 1 || r.statuses[0].code != want.code ||
			*r.statuses[0].limit != *want.limit || r.statuses[0].remaining != 0 || r.statuses[0].reset != want.reset {
			t.Errorf("%q: got %+v", s, r)
		}
	}
	for _, s := range []string{`statuses:{code:OK`, `overall_code:`, `{`} {
		if _, err := parseProtoText(s); err == nil {
			t.Errorf("%q: no error", s)
		}
	}
}
