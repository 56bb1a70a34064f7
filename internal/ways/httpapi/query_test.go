package httpapi

import (
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseQuery(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		tag  string
		cost int
		err  error
	}{
		{"tag=1.2.3.4", "1.2.3.4", 1, nil},
		{"tag=", "", 1, nil},
		{"tag", "", 1, nil},
		{"x=1&tag=a+b%2Fc&cost=7", "a b/c", 7, nil},
		{"tag=%00%ff%E2%82%AC", "\x00\xff€", 1, nil},
		{"tag=a;b", "a;b", 1, nil},
		{"tag=a=b", "a=b", 1, nil},
		{"t%61g=x&c%6Fst=2", "x", 2, nil},
		{"t%61g=x&tag=y", "", 0, errTwoTags},
		{"cost=1000000&tag=a", "a", 1000000, nil},
		{"", "", 0, errNoTag},
		{"tags=a", "", 0, errNoTag},
		{"tag=a&tag=a", "", 0, errTwoTags},
		{"tag=a&cost=1&cost=1", "", 0, errTwoCosts},
		{"tag=%", "", 0, errEscape},
		{"tag=%4", "", 0, errEscape},
		{"tag=%zz", "", 0, errEscape},
		{"tag=a&cost=", "", 0, errBadCost},
		{"tag=a&cost=0", "", 0, errBadCost}, // read only: with a stated limit alone
		{"tag=a&limits=5&pe%72x=1", "a", 1, nil},
		{"tag=a&cost=-1", "", 0, errBadCost},
		{"tag=a&cost=1000001", "", 0, errBadCost},
		{"tag=a&cost=99999999999999999999", "", 0, errBadCost},
	} {
		q, err := parseQuery(tc.raw, nil)
		if err != tc.err || err == nil && (string(q.tag) != tc.tag || q.cost != tc.cost || q.stated) {
			t.Errorf("parseQuery(%q) = %q, %d, stated %v, %v; want %q, %d, %v", tc.raw, q.tag, q.cost, q.stated, err, tc.tag, tc.cost, tc.err)
		}
	}
}

func TestParseQueryAllocatesNothing(t *testing.T) {
	buf := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() { parseQuery("x=1&tag=a+b%2Fc&cost=7", buf) }); n != 0 {
		t.Errorf("%v allocations per parse, want 0", n)
	}
}

// FuzzParseQuery holds the hand-written parser to net/url's reading of
// the same query wherever net/url accepts it, and to a round trip of any
// tag it returns.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"tag=1.2.3.4", "tag=a+b%2F&cost=3", "tag=%", "tag=a&tag=b", "cost=0", "tag=%E2%82%AC&x",
		"&&tag=&", "tag=a;cost=2", "tag=k&limit=10&per=1m", "tag=k&rate=0.5&burst=3&cost=0", "tag=k&algorithm=window&limit=5&per=1h", "t%61g=a&tag=b", "tag=" + strings.Repeat("%41", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := parseQuery(raw, nil)
		if err != nil {
			return
		}
		tag := q.tag
		if q.cost < 0 || q.cost > maxCost || q.cost == 0 && !q.stated || q.req.Hits != q.cost {
			t.Fatalf("parseQuery(%q): cost %d (hits %d, stated %v) out of range", raw, q.cost, q.req.Hits, q.stated)
		}
		if q.stated && q.req.Quota.Check() != nil {
			t.Fatalf("parseQuery(%q): stated %+v out of the table's range: %v", raw, q.req.Quota, q.req.Quota.Check())
		}
		if len(tag) > len(raw) {
			t.Fatalf("parseQuery(%q): tag of %d bytes from %d", raw, len(tag), len(raw))
		}
		if v, uerr := url.ParseQuery(raw); uerr == nil && utf8.ValidString(raw) {
			if tags := v["tag"]; len(tags) != 1 || tags[0] != string(tag) {
				t.Fatalf("parseQuery(%q) = %q; net/url reads %q", raw, tag, tags)
			}
		}
		again, err := parseQuery("tag="+url.QueryEscape(string(tag)), nil)
		if err != nil || string(again.tag) != string(tag) {
			t.Fatalf("round trip of %q: %q, %v", tag, again.tag, err)
		}
	})
}
