package config

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics, that it gives the same answer
// twice (no map order leaks into errors), that every error is an *Error
// prefixed "config: ", and that whatever it accepts is valid.
func FuzzParse(f *testing.F) {
	shipped, err := os.ReadFile("../../dthrottle.toml")
	if err != nil {
		f.Fatal(err)
	}
	// The shipped file without its comment lines: a 5 KB seed leaves the
	// fuzzer minimizing for most of a short run.
	var keys []string
	for _, ln := range strings.Split(string(shipped), "\n") {
		if ln != "" && !strings.HasPrefix(ln, "#") {
			keys = append(keys, ln)
		}
	}
	for _, s := range []string{
		strings.Join(keys, "\n"),
		"",
		"[limit]\nrate = 2.5\nburst = 3\n[gossip]\ninterval = \"250ms\"\npeers = [\"10.0.0.2:7777\"]\n",
		"[[policy]]\nprefix = \"a:\"\nrate = 1\nburst = 1\n[[policy]]\nprefix = \"b:\"\naction = \"deny\"\n",
		"policy = [{prefix = \"x\", action = \"allow\"}]\nlimit.rate = 3\n",
		"[limit]\nbrust = 3\n",
		"[limit]\nrate = \"x\"\n[gossip]\ninterval = 5\n[listen]\nmax_conns = 1.5\n",
		"[listen]\nunix_mode = \"0999\"\n",
		"[admin]\nnote = \"\"\"\nx = 1\n\"\"\"\n",
		"\x00\xff[[[\n=\"",
		"a.b.c = [[1], {x = 2}]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		_, err2 := Parse(data)
		if (err == nil) != (err2 == nil) || err != nil && err.Error() != err2.Error() {
			t.Fatalf("Parse is not deterministic: %v, then %v", err, err2)
		}
		if err != nil {
			if _, ok := errors.AsType[*Error](err); !ok {
				t.Fatalf("error %T is not *Error: %v", err, err)
			}
			if !strings.HasPrefix(err.Error(), "config: ") {
				t.Fatalf("error lacks the config: prefix: %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that Validate rejects: %v", err)
		}
		if m := c.UnixModeBits(); m > 0o777 {
			t.Fatalf("UnixModeBits() = %o", m)
		}
	})
}
