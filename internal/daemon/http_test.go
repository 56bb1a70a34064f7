package daemon

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// get asks the HTTP endpoint at addr (a TCP address, or a Unix socket
// path) for tag, and returns the status and the RateLimit and dry-run
// header fields, as "status ratelimit dry-run".
func get(t *testing.T, network, addr, tag string) string {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}}
	resp, err := c.Get("http://dthrottle/v1/allow?tag=" + tag)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return strings.TrimSpace(resp.Status[:3] + " " + resp.Header.Get("RateLimit") + " " + resp.Header.Get("Dthrottle-Dry-Run"))
}

const withHTTP = base + `
[[policy]]
name = "try"
prefix = "try:"
rate = 0.001
burst = 1
dry_run = true
[http]
listen = "127.0.0.1:0"
`

func TestHTTPSharesTheTable(t *testing.T) {
	r := start(t, withHTTP, nil)
	addr := r.HTTPAddr().String()
	for i, want := range []string{`200 "default";r=2;t=1000`, `200 "default";r=1;t=2000`} {
		if got := get(t, "tcp", addr, "a"); got != want {
			t.Fatalf("request %d: %q, want %q", i, got, want)
		}
	}
	if got := r.ask(t, "a", "a"); got != "OK NO" {
		t.Fatalf("the line protocol after two HTTP requests: %q, want OK NO", got)
	}
	if got := get(t, "tcp", addr, "a"); got != `403 "default";r=0;t=3000` {
		t.Fatalf("after the line protocol spent the bucket: %q", got)
	}
	if got := get(t, "tcp", addr, "try:x") + " | " + get(t, "tcp", addr, "try:x"); got != `200 "try";r=0;t=1000 served | 200 "try";r=0;t=1000 refused` {
		t.Fatalf("dry run: %q", got)
	}
	s := r.snapshot()
	if s.HTTP == nil || s.HTTP.Allowed != 4 || s.HTTP.Refused != 1 {
		t.Fatalf("http counters %+v", s.HTTP)
	}
	if p := s.Policies[1]; p.Name != "try" || !p.DryRun || p.DryRunRefused != 1 || p.OK != 2 {
		t.Fatalf("policy counters %+v", p)
	}
	if v := r.tagView("try:x"); !v.DryRun || v.DryRunRefused != 1 {
		t.Fatalf("tag view %+v: want the dry run and its count", v)
	}
}

// TestHTTPDryRunReload turns the dry run off and on again: the buckets keep
// their state, and refuse_status changes live.
func TestHTTPDryRunReload(t *testing.T) {
	r := start(t, withHTTP, nil)
	addr := r.HTTPAddr().String()
	get(t, "tcp", addr, "try:x")
	off := strings.Replace(withHTTP, "dry_run = true", "dry_run = false", 1) + "refuse_status = 429\n"
	writeConfig(t, filepath.Dir(r.path), r.sock, off)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := get(t, "tcp", addr, "try:x"); got != `429 "try";r=0;t=1000` {
		t.Fatalf("dry run off: %q, want the spent bucket refused with 429", got)
	}
	writeConfig(t, filepath.Dir(r.path), r.sock, withHTTP)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := get(t, "tcp", addr, "try:x"); got != `200 "try";r=0;t=1000 refused` {
		t.Fatalf("dry run on again: %q", got)
	}
	if got := r.ask(t, "try:x"); got != "OK" {
		t.Fatalf("the line protocol under the dry run: %q", got)
	}
	if p := r.snapshot().Policies[1]; p.DryRunRefused != 2 || p.NO != 1 {
		t.Fatalf("policy counters across reloads %+v: want 2 dry-run refusals, 1 refusal", p)
	}
}

func TestHTTPNeedsRestart(t *testing.T) {
	r := start(t, withHTTP, nil)
	writeConfig(t, filepath.Dir(r.path), r.sock, strings.Replace(withHTTP, `listen = "127.0.0.1:0"`, `listen = "127.0.0.1:1"`, 1)+"max_conns = 5\n")
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if ev := r.ev.wait(t, Reloaded, 0); !slices.Equal(ev.Keys, []string{"http.listen", "http.max_conns"}) {
		t.Fatalf("needs a restart: %v", ev.Keys)
	}
}

// TestHTTPUnixSocketAndStop serves the endpoint on a Unix socket, and
// stops taking requests when the daemon stops.
func TestHTTPUnixSocketAndStop(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "http.sock")
	r := start(t, strings.Replace(withHTTP, `listen = "127.0.0.1:0"`, `listen = "unix:`+sock+`"`, 1), nil)
	if got := get(t, "unix", sock, "a"); got != `200 "default";r=2;t=1000` {
		t.Fatalf("over the Unix socket: %q", got)
	}
	r.stop()
	<-r.done
	r.done <- nil
	if err := r.Close(time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("http socket after Close: %v", err)
	}
	if _, err := net.Dial("unix", sock); err == nil {
		t.Fatal("the http socket still accepts after Close")
	}
}
