package harness

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"testing"
)

// CheckDecidedInProcess sends ten requests for each of five new tags: each
// gets three 200s, then 429s with the headers of its bucket; the daemon
// decided all fifty, and was asked over its socket once per tag, for the
// first request, which put the tag in the table.
func CheckDecidedInProcess(t *testing.T, u string, d *Daemon, log, prefix string) {
	t.Helper()
	socket0, decided0 := SharedCounts(t, d)
	retry := regexp.MustCompile(`^[0-9]+$`)
	limit := regexp.MustCompile(`^"default";r=0;t=([0-9]+)$`)
	for i := range 5 {
		tag := fmt.Sprintf("%s-%d", prefix, i)
		for j := range 10 {
			res := SharedGet(t, u, tag, log)
			want := http.StatusOK
			if j >= 3 {
				want = http.StatusTooManyRequests
			}
			if res.StatusCode != want {
				b, _ := os.ReadFile(log)
				t.Fatalf("tag %s, request %d: %s, want %d\n%s", tag, j+1, res.Status, want, b)
			}
			if j != 3 {
				continue
			}
			// The bucket that refused: a burst of 3 at 0.001/s, full again
			// in 3000 s, and 1000 s until a token: refused in process, so
			// the figures are the bucket's, not approximations.
			h := res.Header
			if got := h.Get("RateLimit-Policy"); got != `"default";q=3;w=3000` {
				t.Errorf("RateLimit-Policy %q, want \"default\";q=3;w=3000", got)
			}
			if got := h.Get("Retry-After"); !retry.MatchString(got) {
				t.Errorf("Retry-After %q", got)
			} else if n, _ := strconv.Atoi(got); n < 990 || n > 1000 {
				t.Errorf("Retry-After %d, want about 1000 (one token at 0.001/s)", n)
			}
			if m := limit.FindStringSubmatch(h.Get("RateLimit")); m == nil {
				t.Errorf("RateLimit %q, want \"default\";r=0;t=<about 3000>", h.Get("RateLimit"))
			} else if n, _ := strconv.Atoi(m[1]); n < 2990 || n > 3000 {
				t.Errorf("RateLimit t=%d, want about 3000 (the bucket full again)", n)
			}
		}
	}
	socket1, decided1 := SharedCounts(t, d)
	if got := decided1 - decided0; got != 50 {
		t.Errorf("the daemon counts %v decisions for 50 requests, want 50", got)
	}
	if got := socket1 - socket0; got < 5 || got > 7 {
		t.Errorf("the daemon was asked %v times over its socket for 50 requests of 5 tags, want about 5 (once per new tag)", got)
	}
}
