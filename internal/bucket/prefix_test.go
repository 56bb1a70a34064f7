package bucket

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// linearMatch is the longest matching prefix by scanning every policy, the
// reference the index must agree with.
func linearMatch(s policySet, tag string) int {
	best, bestLen := 0, -1
	for i := 1; i < len(s); i++ {
		p := s[i].Prefix
		if len(tag) >= len(p) && tag[:len(p)] == p && len(p) > bestLen {
			best, bestLen = i, len(p)
		}
	}
	return best
}

func prefixPolicies(prefixes []string) []Policy {
	ps := make([]Policy, len(prefixes))
	for i, p := range prefixes {
		ps[i] = Policy{Prefix: p, Rate: 1, Burst: 1}
	}
	return ps
}

func TestPrefixIndexMatchesLinearScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("ab:\x00\xff")
	word := func(max int) string {
		b := make([]byte, rng.IntN(max+1))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	for round := range 200 {
		seen := map[string]bool{}
		var prefixes []string
		for range rng.IntN(40) {
			p := word(6)
			if p != "" && !seen[p] {
				seen[p] = true
				prefixes = append(prefixes, p)
			}
		}
		set, err := newPolicySet(Policy{Rate: 1, Burst: 1}, prefixPolicies(prefixes), nil)
		if err != nil {
			t.Fatal(err)
		}
		for range 200 {
			tag := word(9)
			got, want := match(set, tag), linearMatch(set, tag)
			if got != want {
				t.Fatalf("round %d: prefixes %q, tag %q: matched %q, want %q", round, prefixes, tag, set[got].Prefix, set[want].Prefix)
			}
			if gotB := match(set, []byte(tag)); gotB != got {
				t.Fatalf("round %d: tag %q matched %d as bytes, %d as a string", round, tag, gotB, got)
			}
		}
	}
}

func TestPrefixIndexSteps(t *testing.T) {
	set, err := newPolicySet(Policy{Rate: 1, Burst: 1}, prefixPolicies([]string{"login:", "login:admin:", "l", "api:"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct{ tag, want string }{
		{"", ""},
		{"x", ""},
		{"l", "l"},
		{"lo", "l"},
		{"login", "l"},
		{"login:", "login:"},
		{"login:bob", "login:"},
		{"login:admin", "login:"},
		{"login:admin:root", "login:admin:"},
		{"api", ""},
		{"api:key", "api:"},
		{"API:key", ""},
	} {
		if got := set[match(set, tc.tag)].Prefix; got != tc.want {
			t.Errorf("step %d: tag %q matched %q, want %q", i, tc.tag, got, tc.want)
		}
	}
}

// BenchmarkPolicyMatch is the policy lookup alone, for a tag that matches
// a prefix policy ("m/...") and for one that falls to the default, with
// 1, 100 and 10,000 prefix policies: the cost must not grow with them.
// The scan rows time a scan over every prefix, for comparison.
func BenchmarkPolicyMatch(b *testing.B) {
	for _, n := range []int{1, 100, 10000} {
		prefixes := make([]string, n)
		for i := range prefixes {
			prefixes[i] = fmt.Sprintf("p%d:", i)
		}
		prefixes[n/2] = "m/"
		set, err := newPolicySet(Policy{Rate: 1, Burst: 1}, prefixPolicies(prefixes), nil)
		if err != nil {
			b.Fatal(err)
		}
		for _, tag := range []string{"m/203.0.113.7", "203.0.113.7"} {
			b.Run(strconv.Itoa(n)+"policies/"+tag, func(b *testing.B) {
				key := []byte(tag)
				b.ReportAllocs()
				for b.Loop() {
					match(set, key)
				}
			})
			// The scan over every prefix that the index replaced, for
			// comparison in the same run.
			b.Run(strconv.Itoa(n)+"policies/scan/"+tag, func(b *testing.B) {
				for b.Loop() {
					linearMatch(set, tag)
				}
			})
		}
	}
}

// TestPrefixIndexSize builds the index of many prefixes, one of them very
// long: it holds one node per distinct leading part of a prefix (and the
// root), nothing more, and still finds the longest prefix at the end of
// the long one.
func TestPrefixIndexSize(t *testing.T) {
	long := strings.Repeat("x", 200000)
	prefixes := []string{long, long[:1000] + "y", "a"}
	for i := range 5000 {
		prefixes = append(prefixes, fmt.Sprintf("p%d:", i))
	}
	set, err := newPolicySet(Policy{Rate: 1, Burst: 1}, prefixPolicies(prefixes), nil)
	if err != nil {
		t.Fatal(err)
	}
	// The long prefix has as many leading parts as bytes, and the one
	// that branches off it adds one; count the short ones' parts.
	parts := map[string]bool{}
	for _, p := range prefixes[2:] {
		for n := 1; n <= len(p); n++ {
			parts[p[:n]] = true
		}
	}
	want := len(long) + 1 + len(parts)
	x := set[0].index
	if len(x.nodes) != want+1 || len(x.edges) != want {
		t.Fatalf("%d nodes and %d edges for %d leading parts of prefixes", len(x.nodes), len(x.edges), want)
	}
	for _, tc := range []struct{ tag, want string }{
		{long + "z", long},
		{long[:199999], ""},
		{long[:1000] + "yz", long[:1000] + "y"},
		{"p4999:1", "p4999:"},
		{"p4999", ""},
		{"abc", "a"},
	} {
		if got := set[match(set, tc.tag)].Prefix; got != tc.want {
			t.Errorf("tag %.20q... (%d bytes) matched %.20q, want %.20q", tc.tag, len(tc.tag), got, tc.want)
		}
	}
}

// BenchmarkNewPolicySet is building the policies, their index included,
// as New and every Reconfigure do, for 10,000 prefix policies.
func BenchmarkNewPolicySet(b *testing.B) {
	prefixes := make([]string, 10000)
	for i := range prefixes {
		prefixes[i] = fmt.Sprintf("tenant-%d:203.0.113.", i)
	}
	ps := prefixPolicies(prefixes)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := newPolicySet(Policy{Rate: 1, Burst: 1}, ps, nil); err != nil {
			b.Fatal(err)
		}
	}
}
