package rls

import (
	"errors"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// tags reads req and returns its descriptors' tags, or the error.
func tags(req *rlsv3.RateLimitRequest, chargeKey string) ([]string, error) {
	var r request
	if err := r.read(req, chargeKey); err != nil {
		return nil, err
	}
	var out []string
	for i := range r.items {
		t := string(r.tag(&r.items[i]))
		if r.items[i].charge {
			t = "charge " + t
		}
		out = append(out, t)
	}
	return out, nil
}

func TestTags(t *testing.T) {
	for _, tc := range []struct {
		domain string
		desc   *rlcommon.RateLimitDescriptor
		want   string
	}{
		{"api", desc("generic_key=upload"), "rls:api|generic_key=upload"},
		{"api", desc("remote_address=10.0.0.1"), "rls:api|remote_address=10.0.0.1"},
		{"api", desc("generic_key=upload", "user=alice"), "rls:api|generic_key=upload|user=alice"},
		{"api", desc("path=/a|b%c"), "rls:api|path=/a%7Cb%25c"},
		{"a|b", desc("k=v"), "rls:a%7Cb|k=v"},
		{"a=b", desc("k=x=y"), "rls:a%3Db|k=x%3Dy"},
		{"api", desc("k="), "rls:api|k="},
		{"api", desc("header_match=a b\tc"), "rls:api|header_match=a b\tc"},
		{"api", desc("k=v", "dthrottle_charge=1"), "charge rls:api|k=v"},
		{"api", desc("dthrottle_charge=1", "k=v"), "charge rls:api|k=v"},
	} {
		got, err := tags(&rlsv3.RateLimitRequest{Domain: tc.domain, Descriptors: []*rlcommon.RateLimitDescriptor{tc.desc}}, DefaultChargeKey)
		if err != nil || len(got) != 1 || got[0] != tc.want {
			t.Errorf("domain %q, %v: tags %q, %v; want %q", tc.domain, tc.desc.GetEntries(), got, err, tc.want)
		}
	}
}

// TestTagsDistinct: descriptors that a plain join of their parts would
// give one tag give different tags, and each tag reads back into its
// domain and entries.
func TestTagsDistinct(t *testing.T) {
	type d struct {
		domain  string
		entries []string
	}
	cases := []d{
		{"a", []string{"b=c"}},
		{"a|b", []string{"=c"}},
		{"a", []string{"b=c|d=e"}},
		{"a", []string{"b=c", "d=e"}},
		{"a", []string{"b|d=c"}},
		{"a", []string{"b=c%7Cd=e"}},
		{"a%7Cb", []string{"=c"}},
		{"a", []string{"b==c"}},
		{"a", []string{"b=", "=c"}},
	}
	seen := map[string]d{}
	for _, c := range cases {
		dd := &rlcommon.RateLimitDescriptor{}
		for _, e := range c.entries {
			k, v, _ := strings.Cut(e, "=")
			dd.Entries = append(dd.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		for _, e := range dd.Entries {
			if e.Key == "" { // an empty key is refused: give it one
				e.Key = "x"
			}
		}
		got, err := tags(&rlsv3.RateLimitRequest{Domain: c.domain, Descriptors: []*rlcommon.RateLimitDescriptor{dd}}, "")
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		if prev, ok := seen[got[0]]; ok {
			t.Errorf("%v and %v share the tag %q", prev, c, got[0])
		}
		seen[got[0]] = c
		if back := unescapeTag(t, got[0]); back != strings.Join(append([]string{c.domain}, keysValues(dd)...), "\x00") {
			t.Errorf("%q reads back as %q", got[0], back)
		}
	}
}

func keysValues(d *rlcommon.RateLimitDescriptor) []string {
	var out []string
	for _, e := range d.GetEntries() {
		out = append(out, e.GetKey()+"\x00"+e.GetValue())
	}
	return out
}

// unescapeTag splits a tag at its '|' and '=' and unescapes the parts,
// joined by NUL.
func unescapeTag(t *testing.T, tag string) string {
	t.Helper()
	rest, ok := strings.CutPrefix(tag, tagPrefix)
	if !ok {
		t.Fatalf("%q has no prefix %q", tag, tagPrefix)
	}
	var parts []string
	for i, part := range strings.Split(rest, "|") {
		fields := []string{part}
		if i > 0 {
			k, v, ok := strings.Cut(part, "=")
			if !ok || strings.Contains(v, "=") {
				t.Fatalf("%q: entry %q is not one key=value", tag, part)
			}
			fields = []string{k, v}
		}
		for _, f := range fields {
			r := strings.NewReplacer("%25", "%", "%7C", "|", "%3D", "=")
			parts = append(parts, r.Replace(f))
		}
	}
	return strings.Join(parts, "\x00")
}

func TestReadBad(t *testing.T) {
	long := strings.Repeat("x", MaxStringBytes+1)
	many := func(n int) []*rlcommon.RateLimitDescriptor {
		out := make([]*rlcommon.RateLimitDescriptor, n)
		for i := range out {
			out[i] = desc("k=v")
		}
		return out
	}
	entries := func(n int) *rlcommon.RateLimitDescriptor {
		d := &rlcommon.RateLimitDescriptor{}
		for range n {
			d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
		}
		return d
	}
	negative := desc("k=v")
	negative.IsNegativeHits = true
	for _, tc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string // "" if valid
	}{
		{"empty domain", &rlsv3.RateLimitRequest{Descriptors: many(1)}, "domain: empty"},
		{"long domain", &rlsv3.RateLimitRequest{Domain: long, Descriptors: many(1)}, "domain: 1025 bytes, at most 1024"},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "api"}, "descriptors: none"},
		{"64 descriptors", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: many(64)}, ""},
		{"65 descriptors", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: many(65)}, "descriptors: 65, at most 64"},
		{"5000 descriptors", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: many(5000)}, "descriptors: 5000, at most 64"},
		{"no entries", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k=v"), {}}}, "descriptors[1]: no entries"},
		{"only the charge entry", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k=v"), desc(DefaultChargeKey + "=")}}, "descriptors[1]: no entries but the charge entry (" + DefaultChargeKey + ")"},
		{"16 entries", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommon.RateLimitDescriptor{entries(16)}}, ""},
		{"17 entries", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommon.RateLimitDescriptor{entries(17)}}, "descriptors[0]: 17 entries, at most 16"},
		{"empty key", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k=v", "=v")}}, "descriptors[0].entries[1].key: empty"},
		{"long key", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommon.RateLimitDescriptor{desc(long + "=v")}}, "descriptors[0].entries[0].key: 1025 bytes, at most 1024"},
		{"long value", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k=" + long)}}, "descriptors[0].entries[0].value: 1025 bytes, at most 1024"},
		{"1024-byte parts", &rlsv3.RateLimitRequest{Domain: long[1:], Descriptors: []*rlcommon.RateLimitDescriptor{desc(long[1:] + "=" + long[1:])}}, ""},
		{"negative hits", &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommon.RateLimitDescriptor{negative}}, "descriptors[0].is_negative_hits: tokens are never given back"},
	} {
		_, err := tags(tc.req, DefaultChargeKey)
		var br badRequest
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want it read", tc.name, err)
		case tc.want != "" && (!errors.As(err, &br) || err.Error() != tc.want):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// The cost in effect: the descriptor's hits_addend, else the request's,
// whose 0 is unset: 1.
func TestReadCost(t *testing.T) {
	for _, tc := range []struct {
		req  uint32
		desc *rlcommon.RateLimitDescriptor
		want uint64
	}{
		{0, desc("k=v"), 1},
		{5, desc("k=v"), 5},
		{5, hits(desc("k=v"), 0), 0},
		{5, hits(desc("k=v"), 2), 2},
		{0, hits(desc("k=v"), 1<<40), 1 << 40},
		{1<<32 - 1, desc("k=v"), 1<<32 - 1},
	} {
		var r request
		if err := r.read(&rlsv3.RateLimitRequest{Domain: "d", HitsAddend: tc.req, Descriptors: []*rlcommon.RateLimitDescriptor{tc.desc}}, ""); err != nil {
			t.Fatal(err)
		}
		if got := r.items[0].cost; got != tc.want {
			t.Errorf("request %d, descriptor %v: cost %d, want %d", tc.req, tc.desc.GetHitsAddend(), got, tc.want)
		}
	}
}

func BenchmarkRead(b *testing.B) {
	req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*rlcommon.RateLimitDescriptor{
		desc("generic_key=upload", "remote_address=192.0.2.1"), desc("path=/v1/a|b")}}
	var r request
	b.ReportAllocs()
	for b.Loop() {
		if err := r.read(req, DefaultChargeKey); err != nil {
			b.Fatal(err)
		}
	}
}
