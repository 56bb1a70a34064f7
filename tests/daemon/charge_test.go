package daemon

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/dthrottle/dthrottle/tests/harness"
)

// chargeConfig is burst3 with the charge socket beside the query socket,
// and the admin endpoint.
const chargeConfig = `
[listen]
unix = "%SOCK%"
unix_mode = "0600"
charge_unix = "%SOCK%.charge"
[limit]
rate = 0.001
burst = 3
[admin]
http = "127.0.0.1:0"
`

// TestNcCharge charges with nc on the charge socket of the real daemon:
// 10 tokens on a tag of burst 3 leave it in debt, so the query socket
// refuses it; a malformed line gets BAD and the lines after it are still
// answered in step.
func TestNcCharge(t *testing.T) {
	d := harness.StartDaemon(t, chargeConfig)
	charge := d.Sock + ".charge"
	// The example of docs/protocol.md, "The charge socket".
	if got := harness.NC(t, "10 1.2.3.4\n", "-U", charge); got != "OK\n" {
		t.Fatalf("charging 10: %q, want OK", got)
	}
	if got := harness.NC(t, "1.2.3.4\n", "-U", d.Sock); got != "NO\n" {
		t.Fatalf("a query after charging 10 on burst 3: %q, want NO", got)
	}
	if got := harness.NC(t, "ten 1.2.3.4\n1 1.2.3.4\n", "-U", charge); got != "BAD\nOK\n" {
		t.Fatalf("a malformed line, then a charge: %q, want BAD OK", got)
	}
	// BAD for a malformed count and an empty line, OK for the rest, in
	// order; CR stripped; an empty tag charged nothing; the last line
	// without "\n" answered.
	got := harness.NC(t, "ten b\n1 b\r\n\n4294967296 b\n0 \n1 b\n-1 b\n1 c", "-U", charge)
	if want := "BAD\nOK\nBAD\nBAD\nOK\nOK\nBAD\nOK\n"; got != want {
		t.Fatalf("charges with malformed lines: %q, want %q", got, want)
	}
	if got := harness.NC(t, "b\nb\nc\nc\nc\n", "-U", d.Sock); got != "OK\nNO\nOK\nOK\nNO\n" {
		t.Fatalf("queries after charging b 2 and c 1: %q", got)
	}
	fams := harness.Scrape(t, d.AdminAddr(t))
	for _, m := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"dthrottle_charge_lines_total", []string{"result=ok"}, 6},
		{"dthrottle_charge_lines_total", []string{"result=bad"}, 5},
		{"dthrottle_policy_charges_total", []string{"policy=default"}, 5},
		{"dthrottle_policy_charged_tokens_total", []string{"policy=default"}, 14},
		{"dthrottle_queries_total", []string{"result=no"}, 3},
	} {
		if got := harness.Metric(t, fams, m.name, m.labels...); got != m.want {
			t.Errorf("%s%v = %v, want %v", m.name, m.labels, got, m.want)
		}
	}
	code, body := harness.HTTPDo(t, "GET", "http://"+d.AdminAddr(t)+"/v1/tags/1.2.3.4")
	if code != 200 || !strings.Contains(body, `"unreported":11`) {
		t.Errorf("/v1/tags/1.2.3.4: %d %s, want 11 hits unreported", code, body)
	}
}

// llmConfig is the configuration of the recipe in
// docs/integrations/charging.md.
const llmConfig = `
[listen]
unix = "%SOCK%"
charge_unix = "%SOCK%.charge"
[[policy]]
name = "llm"
prefix = "llm:"
rate = 100
burst = 20000
[http]
listen = "127.0.0.1:0"
`

var headerLines = regexp.MustCompile(`(?im)^(HTTP|RateLimit|Retry).*$`)

// TestChargeRecipe runs the recipe of docs/integrations/charging.md with
// curl: ask for the prompt's tokens before calling the model, charge the
// answer's tokens after, and the next request is refused until the debt
// has refilled.
func TestChargeRecipe(t *testing.T) {
	curl := harness.RequireTool(t, "curl")
	d, addr := harness.StartHTTPDaemon(t, llmConfig)
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(curl, append([]string{"-s", "-o", "/dev/null"}, args...)...).Output()
		if err != nil {
			t.Fatalf("curl %v: %v", args, err)
		}
		return strings.Join(headerLines.FindAllString(strings.ReplaceAll(string(out), "\r", ""), -1), "\n")
	}
	base := "http://" + addr
	if got, want := run("-D", "-", base+"/v1/allow?tag=llm:key-42&cost=1200"),
		"HTTP/1.1 200 OK\nRateLimit: \"llm\";r=18800;t=12\nRateLimit-Policy: \"llm\";q=20000;w=200"; got != want {
		t.Fatalf("before the model:\n%s\nwant\n%s", got, want)
	}
	out, err := exec.Command(curl, "-s", "-o", "/dev/null", "-w", "%{http_code}\n", "-X", "POST",
		base+"/v1/charge?tag=llm:key-42&cost=24000").Output()
	if err != nil || string(out) != "204\n" {
		t.Fatalf("charging the answer's tokens: %q, %v; want 204", out, err)
	}
	if got, want := run("-D", "-", base+"/v1/allow?tag=llm:key-42&cost=1000"),
		"HTTP/1.1 403 Forbidden\nRateLimit: \"llm\";r=0;t=252\nRateLimit-Policy: \"llm\";q=20000;w=200\nRetry-After: 62"; got != want {
		t.Fatalf("the next request:\n%s\nwant\n%s", got, want)
	}
	// The same charge over the charge socket, on a key with tokens left:
	// the bucket it leaves refuses what it would have served.
	if got := run("-D", "-", base+"/v1/allow?tag=llm:key-7&cost=1200"); !strings.HasPrefix(got, "HTTP/1.1 200") {
		t.Fatalf("key-7 before: %q, want 200", got)
	}
	if got := harness.NC(t, "24000 llm:key-42\n24000 llm:key-7\n", "-U", d.Sock+".charge"); got != "OK\nOK\n" {
		t.Fatalf("the charge socket: %q, want OK OK", got)
	}
	if got := run("-D", "-", base+"/v1/allow?tag=llm:key-7&cost=1"); !strings.HasPrefix(got, "HTTP/1.1 403") {
		t.Fatalf("key-7 after a charge of 24000 on the socket: %q, want 403", got)
	}
}
