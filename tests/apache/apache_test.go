package apache

import (
	"bytes"
	"os"
	"testing"

	"github.com/dthrottle/dthrottle/tests/harness"
)

// TestApache runs a real Apache with contrib/apache's config in front of a
// real dthrottled (burst 3): the first three requests from 127.0.0.1 are
// served, the next refused with 429 and Retry-After; with dthrottled
// stopped, Apache serves again (fail open).
func TestApache(t *testing.T) {
	d := harness.StartDaemon(t, harness.Burst3)
	a := harness.StartApache(t, harness.CLIBinary(t), d.Sock)
	for i, want := range []int{200, 200, 200, 429, 429} {
		status, retry := a.Get(t)
		wantRetry := ""
		if want == 429 {
			wantRetry = "1"
		}
		if status != want || retry != wantRetry {
			log, _ := os.ReadFile(a.ErrLog)
			t.Fatalf("request %d: status %d, Retry-After %q; want %d, %q\nerror log:\n%s", i+1, status, retry, want, wantRetry, log)
		}
	}
	d.Stop(t)
	for i := range 3 {
		if status, _ := a.Get(t); status != 200 {
			t.Fatalf("dthrottled stopped, request %d: status %d, want 200 (fail open)", i+1, status)
		}
	}
	log, err := os.ReadFile(a.ErrLog)
	harness.Must(t, err)
	if !bytes.Contains(log, []byte("daemon unreachable, failing open")) {
		t.Errorf("error log does not mention the outage:\n%s", log)
	}
}
