package rls

import (
	"fmt"
	"math"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/tests/harness"
)

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

// startRLSDaemon starts dthrottled on config and returns the rate limit
// service's address once it accepts connections.
func startRLSDaemon(t *testing.T, config string) string {
	t.Helper()
	harness.RequireRLS(t, config)
	config, addr := harness.PinPort(t, config, "listen")
	harness.StartDaemon(t, config)
	testkit.WaitFor(t, 10*time.Second, "the rate limit service to accept on "+addr, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return addr
}

func TestRLSReferenceClientBurst(t *testing.T) {
	addr := startRLSDaemon(t, rlsConfig)
	client := filepath.Join(harness.RLSReference(t), "client_cmd")

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
	client := filepath.Join(harness.RLSReference(t), "client_cmd")

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
	client := filepath.Join(harness.RLSReference(t), "client_cmd")

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
	harness.RequireRLS(t, config)
	harness.StartDaemon(t, config)
	client := filepath.Join(harness.RLSReference(t), "client_cmd")
	testkit.WaitFor(t, 10*time.Second, "the rate limit service on "+sock, func() bool { return harness.FileExists(sock) })
	for i, want := range []string{"OK", "OK", "OK", "OVER_LIMIT"} {
		if r := askRLS(t, client, "unix:"+sock, "api", "generic_key=upload"); r.overall != want {
			t.Fatalf("call %d: got %+v, want %s", i+1, r, want)
		}
	}
}
