package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// The admin endpoint's documents, as dthrottled serves them.
const (
	healthJSON = `{"status":"ok","peers":2,"seconds_since_report":0.4}`
	peersJSON  = `[
 {"node":"c3d4e5f6a7b8c9d0","addr":"10.0.0.3:7777","first_heard":"2026-01-01T00:00:00Z","last_heard":"2026-01-01T00:59:50Z","packets":9,"hits":10,"lost":1,"repaired":5,"duplicates":2,"fingerprint_match":false,"silent":true,"found":"learned","relay":"segment","missing":true,"delay_seconds":0.002,"behind_seconds":1.002},
 {"node":"9f86d081884c7d65","addr":"10.0.0.2:7777","first_heard":"2026-01-01T00:00:00Z","last_heard":"2026-01-01T00:59:59.6Z","packets":123,"hits":4567,"lost":0,"duplicates":0,"fingerprint_match":true,"silent":false,"delay_seconds":0.02,"behind_seconds":1.02}]`
	tagJSON     = `{"tag":"1.2.3.4","key":"1.2.3.4","tracked":true,"policy":"default","action":"limit","rate":1,"burst":10,"tokens":3.5,"debt":0,"unreported":2}`
	untracked   = `{"tag":"a b/c","key":"a b/c","tracked":false,"policy":"login","action":"limit","rate":0.2,"burst":5,"tokens":5,"debt":0,"unreported":0}`
	forgetJSON  = `{"tag":"a b/c","forgotten":true}`
	dryRunJSON  = `{"tag":"try:x","key":"try:x","tracked":true,"policy":"try","action":"limit","rate":1,"burst":2,"tokens":0,"debt":0,"unreported":2,"dry_run":true,"dry_run_refused":7}`
	statsJSON   = `{"version":"v1.2.3","uptime_seconds":12.3,"tags":1234,"evictions":0,"evicted_hits":0,"connections":{"active":3,"accepted":10,"rejected":0},"queries":{"total":100,"ok":90,"no":10,"line_too_long":0},"policies":[{"name":"default","ok":90,"no":10}],"gossip":{"enabled":true,"node":"0102030405060708","packets_sent":1,"bytes_sent":1,"packets_received":1,"bytes_received":1,"dropped":{"auth":0,"malformed":0,"version":0,"duplicate":0},"lost":0,"repair":{"requests":2,"asked":3,"repaired":3,"resent":4,"suppressed":1,"gone":0,"refused":0},"fingerprint_mismatch":0,"peers":2,"peers_missing":1,"share":0.67}}`
	unknownKeys = `{"status":"degraded","peers":0,"seconds_since_report":75,"added_later":[1,2]}`
)

// fakeAdmin serves documents by "METHOD PATH" (the path as sent, escaped)
// and records the requests.
type fakeAdmin struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

func startAdmin(t *testing.T, docs map[string]string) *fakeAdmin {
	t.Helper()
	f := &fakeAdmin{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Method + " " + r.URL.EscapedPath()
		f.mu.Lock()
		f.seen = append(f.seen, key)
		f.mu.Unlock()
		doc, ok := docs[key]
		if !ok {
			http.Error(w, "no such thing", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(doc))
	}))
	t.Cleanup(f.Close)
	return f
}

// runCmd runs the command in process with the clock at 2026-01-01T01:00:00Z.
func runCmd(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	now := func() time.Time { return time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC) }
	code = run(args, env{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb, now: now})
	return code, out.String(), errb.String()
}

func TestAdminCommands(t *testing.T) {
	f := startAdmin(t, map[string]string{
		"GET /healthz":              healthJSON,
		"GET /v1/peers":             peersJSON,
		"GET /v1/tags/1.2.3.4":      tagJSON,
		"GET /v1/tags/a%20b%2Fc":    untracked,
		"GET /v1/tags/try:x":        dryRunJSON,
		"DELETE /v1/tags/a%20b%2Fc": forgetJSON,
		"GET /v1/stats":             statsJSON,
	})
	addr := strings.TrimPrefix(f.URL, "http://")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"health", "-admin", addr}, "ok: 2 peers, last report 400ms ago\n"},
		{[]string{"peers", "-admin", f.URL}, `
split: 1 missing; this node's share of the rate is 0.67 (held by policies under partition "share")
NODE              ADDRESS        STATE    LAST HEARD  FIRST HEARD  PACKETS  HITS  LOST  REPAIRED  DUPLICATES  POLICIES  FOUND    RELAY    BEHIND
9f86d081884c7d65  10.0.0.2:7777  live     400ms ago   1h0m0s ago   123      4567  0     0         0           same      -        -        1.020s
c3d4e5f6a7b8c9d0  10.0.0.3:7777  MISSING  10s ago     1h0m0s ago   9        10    1     5         2           DIFFER    learned  segment  1.002s
`},
		{[]string{"tag", "-admin", addr, "1.2.3.4"}, `
tag         "1.2.3.4"
policy      default (limit)
limit       1 per second, burst 10
tracked     yes
tokens      3.5 of 10
unreported  2 hits not yet sent to peers
`},
		{[]string{"tag", "-admin", addr, "a b/c"}, `
tag         "a b/c"
policy      login (limit)
limit       0.2 per second, burst 5
tracked     no (its bucket is full)
tokens      5 of 5
unreported  0 hits not yet sent to peers
`},
		{[]string{"tag", "-admin", addr, "try:x"}, `
tag         "try:x"
policy      try (limit)
dry run     yes: served whatever the limit says; 7 queries of this policy would have been refused
limit       1 per second, burst 2
tracked     yes
tokens      0 of 2
unreported  2 hits not yet sent to peers
`},
		{[]string{"forget", "-admin", addr, "a b/c"}, "a b/c: forgotten, its bucket is full again\n"},
		{[]string{"stats", "-admin", addr}, `
version            v1.2.3
uptime             12.3s
tags tracked       1234
evictions          0 (0 unreported hits lost with them)
connections        3 active, 10 accepted, 0 rejected over max_conns
queries            100: 90 OK, 10 NO (10.0% refused), 0 lines too long
gossip             node 0102030405060708, 2 peers
  sent             1 datagrams, 1 bytes
  received         1 datagrams, 1 bytes
  dropped          0 bad MAC, 0 malformed, 0 other version, 0 duplicates, 0 stale
  lost             0 datagrams (3 repaired)
  repair           3 datagrams asked for in 2 requests; for peers 4 resent, 1 suppressed, 0 gone, 0 refused
  policy mismatch  0 datagrams

POLICY   OK  NO  REFUSED
default  90  10  10.0%
`},
	} {
		code, out, errs := runCmd(t, "", tc.args...)
		if code != exitOK || out != strings.TrimPrefix(tc.want, "\n") {
			t.Errorf("dthrottle %s: exit %d, stderr %q, output:\n%s\nwant:\n%s", strings.Join(tc.args, " "), code, errs, out, strings.TrimPrefix(tc.want, "\n"))
		}
	}
}

func TestAdminErrors(t *testing.T) {
	f := startAdmin(t, map[string]string{"GET /healthz": unknownKeys, "GET /v1/peers": `[]`, "GET /v1/stats": `{"queries":`})
	addr := strings.TrimPrefix(f.URL, "http://")
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"health", "-admin", addr}, exitRefused, "degraded: 0 peers, last report 1m15s ago\n", ""},
		{[]string{"peers", "-admin", addr}, exitOK, "no peers heard (gossip off, or nobody else is reporting)\n", ""},
		{[]string{"stats", "-admin", addr}, exitError, "", "decoding GET"},
		{[]string{"tag", "-admin", addr, "nope"}, exitError, "", "404 Not Found: no such thing"},
		{[]string{"tag", "-admin", addr}, exitError, "", "Usage"},
		{[]string{"peers", "-admin", "127.0.0.1:1"}, exitError, "", "is admin.http set"},
		{[]string{"bogus"}, exitError, "", `unknown command "bogus"`},
		{nil, exitError, "", "usage:"},
	} {
		code, out, errs := runCmd(t, "", tc.args...)
		if code != tc.code || out != tc.stdout || !strings.Contains(errs, tc.stderr) {
			t.Errorf("dthrottle %s: exit %d, stdout %q, stderr %q; want %d, %q, stderr with %q",
				strings.Join(tc.args, " "), code, out, errs, tc.code, tc.stdout, tc.stderr)
		}
	}
}
