package admin

import (
	"encoding/json"
	"strings"
	"testing"
)

// A tag that is not UTF-8 is escaped with its backslashes doubled, so no
// two tags print alike; a valid one is itself.
func TestPrintable(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		escaped  bool
	}{
		{"1.2.3.4", "1.2.3.4", false},
		{`\xff`, `\xff`, false}, // valid: itself, exactly
		{"\xff", `\xff`, true},
		{"a\\\xff", `a\\\xff`, true},
		{"\x1b", "\x1b", false},
	} {
		got, escaped := printable(tc.in)
		if got != tc.want || escaped != tc.escaped {
			t.Errorf("printable(%q) = %q, %v; want %q, %v", tc.in, got, escaped, tc.want, tc.escaped)
		}
	}
	if a, _ := printable("x\\xff\xfe"); a == printableText("x\xff\xfe") {
		t.Errorf("two tags print alike: %q", a)
	}
}

// Characters a terminal would not show (DEL, C1, bidi, zero-width, a
// character beyond the BMP that formats) leave as \u escapes, and the
// document decodes to the same strings.
func TestJSONSafe(t *testing.T) {
	in := "a\x7fb\u0085c\u202ed\u200be\ufefff\U000e0001g\u00e9\u4e16\x1b"
	doc, err := json.Marshal(map[string]string{"tag": in})
	if err != nil {
		t.Fatal(err)
	}
	safe := jsonSafe(doc)
	want := `{"tag":"a\u007fb\u0085c\u202ed\u200be\ufefff\udb40\udc01g` + "\u00e9\u4e16" + `\u001b"}`
	if string(safe) != want {
		t.Errorf("jsonSafe:\n got %s\nwant %s", safe, want)
	}
	if strings.ContainsFunc(string(safe), func(r rune) bool { return r >= 0x7f && notShown(r) }) {
		t.Errorf("raw invisible characters left: %q", safe)
	}
	var back map[string]string
	if err := json.Unmarshal(safe, &back); err != nil || back["tag"] != in {
		t.Errorf("decodes to %q, %v; want %q", back["tag"], err, in)
	}
}
