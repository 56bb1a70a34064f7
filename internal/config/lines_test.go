package config

import (
	"fmt"
	"strings"
	"testing"
)

func TestScanKeys(t *testing.T) {
	src := strings.Join([]string{
		`# comment`,             // 1
		`top = 1`,               // 2
		`a.b = 2 # c = 3`,       // 3
		`[limit]`,               // 4
		`  rate=1`,              // 5
		`"quoted key" . x = 1`,  // 6
		`s = """`,               // 7
		`fake = 1`,              // 8
		`"""`,                   // 9
		`arr = [ "[x]", # ]`,    // 10
		`  "y = 1",`,            // 11
		`  ["z"], [1, 2],`,      // 12
		`]`,                     // 13
		`[[policy]]`,            // 14
		`name = 'a'`,            // 15
		`[ policy . sub ]`,      // 16
		`k = 1`,                 // 17
		`[[policy]]`,            // 18
		`name = "b"`,            // 19
		`[gossip]`,              // 20
		`t = { x = 1 }`,         // 21
		`lit = '''one line'''`,  // 22
		`after = 1`,             // 23
		"crlf = 1\r",            // 24
		`= 1`,                   // 25: not a key
		`bad."unterminated = 1`, // 26: not a key
	}, "\n")
	want := []string{
		"2 -1 [top]",
		"3 -1 [a b]",
		"4 -1 [limit]",
		"5 -1 [limit rate]",
		"6 -1 [limit quoted key x]",
		"7 -1 [limit s]",
		"10 -1 [limit arr]",
		"14 0 [policy]",
		"15 0 [policy name]",
		"16 0 [policy sub]",
		"17 0 [policy sub k]",
		"18 1 [policy]",
		"19 1 [policy name]",
		"20 -1 [gossip]",
		"21 -1 [gossip t]",
		"22 -1 [gossip lit]",
		"23 -1 [gossip after]",
		"24 -1 [gossip crlf]",
	}
	got := scanKeys(src)
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = fmt.Sprintf("%d %d %v", got[i].line, got[i].elem, got[i].path)
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("key %d: got %q, want %q", i, g, w)
		}
	}

	for _, tc := range []struct {
		path []string
		elem int
		want int
	}{
		{[]string{"policy", "name"}, 1, 19},
		{[]string{"policy", "name"}, 0, 15},
		{[]string{"policy", "rate"}, 1, 18}, // absent: the element's header
		{[]string{"policy", "rate"}, 2, 0},  // no such element
		{[]string{"limit", "burst"}, -1, 4}, // absent: the table's header
		{[]string{"limit", "rate"}, -1, 5},
		{[]string{"admin", "http"}, -1, 0},
	} {
		if got := lineOf(got, tc.path, tc.elem); got != tc.want {
			t.Errorf("lineOf(%v, %d) = %d, want %d", tc.path, tc.elem, got, tc.want)
		}
	}
	if n := nthLine(got, []string{"policy"}, 1); n != 18 {
		t.Errorf("nthLine(policy, 1) = %d, want 18", n)
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"brust", "burst", 2}, {"rate", "rate", 0}, {"listn", "listen", 1}, {"", "abc", 3}, {"kitten", "sitting", 3},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
