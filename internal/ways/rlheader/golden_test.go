package rlheader

import (
	"bufio"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

var updateHeaders = flag.Bool("update-headers", false, "write the expected values in testdata/headers.txt anew, from the inputs")

// goldenFile holds the cases libdthrottle's dt_headers passes too
// (libdthrottle/dt_conform_headers.c): the file's comment says its format.
const goldenFile = "testdata/headers.txt"

// goldenCase is one line of goldenFile: a verdict, and the three values.
type goldenCase struct {
	line                      int      // from 1
	in                        []string // the eight input fields, as written
	v                         bucket.Verdict
	policy, limit, retryAfter string // retryAfter "-": none
}

var goldenActions = map[string]bucket.Action{"limit": bucket.Limit, "allow": bucket.Allow, "deny": bucket.Deny}

// parseGolden reads the cases of goldenFile, and all its lines.
func parseGolden(t *testing.T) (cases []goldenCase, lines []string) {
	t.Helper()
	f, err := os.Open(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		lines = append(lines, line)
		if line == "" || line[0] == '#' {
			continue
		}
		c, err := parseGoldenLine(line)
		if err != nil {
			t.Fatalf("%s:%d: %v", goldenFile, n, err)
		}
		c.line = n
		cases = append(cases, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cases, lines
}

func parseGoldenLine(line string) (goldenCase, error) {
	f := strings.Split(line, "\t")
	if len(f) != 11 {
		return goldenCase{}, fmt.Errorf("%d fields, want 11", len(f))
	}
	c := goldenCase{in: f[:8], policy: f[8], limit: f[9], retryAfter: f[10]}
	name, err := hex.DecodeString(strings.TrimPrefix(f[0], "-"))
	if err != nil {
		return c, fmt.Errorf("name: %w", err)
	}
	action, ok := goldenActions[f[1]]
	if !ok {
		return c, fmt.Errorf("action %q", f[1])
	}
	burst, err1 := strconv.ParseUint(f[2], 10, 32)
	rate, err2 := strconv.ParseFloat(f[3], 64)
	served, err3 := strconv.ParseBool(f[4])
	tokens, err4 := strconv.ParseFloat(f[5], 64)
	wait, err5 := strconv.ParseInt(f[6], 10, 64)
	full, err6 := strconv.ParseInt(f[7], 10, 64)
	for _, err := range []error{err1, err2, err3, err4, err5, err6} {
		if err != nil {
			return c, err
		}
	}
	c.v = bucket.Verdict{
		Allowed: served,
		Policy:  bucket.Policy{Name: string(name), Action: action, Burst: int(burst), Rate: rate},
		Tokens:  tokens,
		Wait:    time.Duration(wait),
		Full:    time.Duration(full),
	}
	return c, nil
}

// values is what this package states of v, as goldenFile writes it.
func values(v bucket.Verdict) (policy, limit, retryAfter string) {
	retryAfter = "-"
	if s, ok := RetryAfter(v); ok {
		retryAfter = strconv.FormatInt(s, 10)
	}
	return string(AppendPolicy(nil, v.Policy)), string(AppendRateLimit(nil, v)), retryAfter
}

// TestGolden checks the cases C's dt_headers passes, so that a header
// states a verdict alike whichever side wrote it. -update-headers
// rewrites each line's three values from its inputs.
func TestGolden(t *testing.T) {
	cases, lines := parseGolden(t)
	if len(cases) < 20 {
		t.Fatalf("%d cases in %s, want at least 20", len(cases), goldenFile)
	}
	if *updateHeaders {
		for _, c := range cases {
			p, l, r := values(c.v)
			lines[c.line-1] = strings.Join(append(c.in[:8:8], p, l, r), "\t")
		}
		if err := os.WriteFile(goldenFile, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	for _, c := range cases {
		p, l, r := values(c.v)
		if p != c.policy || l != c.limit || r != c.retryAfter {
			t.Errorf("%s:%d: got %s | %s | %s; want %s | %s | %s", goldenFile, c.line, p, l, r, c.policy, c.limit, c.retryAfter)
		}
	}
}
