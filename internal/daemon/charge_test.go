package daemon

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	mt "github.com/dthrottle/dthrottle/internal/metric/metrictest"
)

// chargeLines sends lines on one connection to addr and returns the
// replies, one per line, joined by spaces.
func chargeLines(t *testing.T, addr net.Addr, lines ...string) string {
	t.Helper()
	c, err := net.Dial(addr.Network(), addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(strings.Join(lines, "\n") + "\n")); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(c)
	var out []string
	for range lines {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("reading replies: %v (got %q)", err, out)
		}
		out = append(out, strings.TrimSuffix(line, "\n"))
	}
	return strings.Join(out, " ")
}

// withCharge is base with the charge socket on, over Unix and TCP, and
// the HTTP endpoint.
var withCharge = strings.Replace(base, "[limit]", "charge_unix = \"%SOCK%.charge\"\ncharge_tcp = \"127.0.0.1:0\"\n[limit]", 1) +
	"[http]\nlisten = \"127.0.0.1:0\"\n"

// TestChargeSharesTheTable: the charge socket, over Unix and TCP, and the
// HTTP endpoint's POST /v1/charge charge the table the query socket
// decides from, and the charged tokens are hits to report.
func TestChargeSharesTheTable(t *testing.T) {
	r := start(t, withCharge, nil)
	addrs := r.ChargeAddrs()
	if len(addrs) != 2 || addrs[0].Network() != "unix" || addrs[1].Network() != "tcp" {
		t.Fatalf("charge socket on %v, want a Unix and a TCP address", addrs)
	}
	if got := chargeLines(t, addrs[0], "10 a", "x", "0 b"); got != "OK BAD OK" {
		t.Fatalf("unix: %q, want OK BAD OK", got)
	}
	if got := r.ask(t, "a", "b", "b", "b", "b"); got != "NO OK OK OK NO" {
		t.Fatalf("queries after charging a 10: %q", got)
	}
	if got := chargeLines(t, addrs[1], "1 c"); got != "OK" {
		t.Fatalf("tcp: %q", got)
	}
	resp, err := http.Post("http://"+r.HTTPAddr().String()+"/v1/charge?tag=c&cost=1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("POST /v1/charge: %s", resp.Status)
	}
	if got := r.ask(t, "c", "c"); got != "OK NO" {
		t.Fatalf("queries after charging c twice: %q, want OK NO", got)
	}
	if v := r.tagView("a"); v.Unreported != 10 || v.Tokens > -6.9 {
		t.Fatalf("a: %+v, want 10 unreported and about -7 tokens", v)
	}
	fams := mt.Gather(t, r.collectors()...)
	mt.Expect(t, fams,
		mt.Sample{Name: "dthrottle_charge_lines_total", Labels: "result=ok", Kind: mt.Counter, Value: 3},
		mt.Sample{Name: "dthrottle_charge_lines_total", Labels: "result=bad", Kind: mt.Counter, Value: 1},
		mt.Sample{Name: "dthrottle_http_requests_total", Labels: "result=charged", Kind: mt.Counter, Value: 1},
		mt.Sample{Name: "dthrottle_policy_charges_total", Labels: "policy=default", Kind: mt.Counter, Value: 3},
		mt.Sample{Name: "dthrottle_policy_charged_tokens_total", Labels: "policy=default", Kind: mt.Counter, Value: 12},
	)
	mt.Lint(t, r.collectors()...)

	// Stopped, the charge socket's file is gone with the query socket's.
	r.stop()
	<-r.done
	r.done <- nil
	r.Close(time.Second)
	if _, err := net.Dial("unix", addrs[0].String()); err == nil {
		t.Error("the charge socket still answers after the stop")
	}
}

// Without charge_unix or charge_tcp, there is no charge socket and none
// of its families.
func TestChargeOff(t *testing.T) {
	r := start(t, base, nil)
	if addrs := r.ChargeAddrs(); addrs != nil {
		t.Fatalf("charge socket on %v with none configured", addrs)
	}
	mt.Absent(t, mt.Gather(t, r.collectors()...), "dthrottle_charge_")
}
