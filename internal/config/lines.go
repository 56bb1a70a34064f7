package config

import (
	"slices"
	"strconv"
	"strings"
)

// The TOML decoder reports which keys a document holds but not where. This
// file finds their lines by reading the source the simple way: table headers
// and "key =" at the start of a line, skipping the insides of multi-line
// strings and arrays. Keys it cannot see (inside inline tables, for one) get
// no line.

// keyLine is one key, table header or array-of-tables header in the source.
type keyLine struct {
	path []string // full key, headers included, e.g. ["limit", "rate"]
	elem int      // index of the enclosing [[array]] element, or -1
	line int      // 1-based
}

// scanKeys lists the keys of src in document order.
func scanKeys(src string) []keyLine {
	var (
		out    []keyLine
		table  []string // current [table] or [[array]]
		array  []string // the last [[array]] header
		elem   = -1     // its index
		counts = map[string]int{}
		inML   string // closing delimiter of an open multi-line string
		depth  int    // open brackets of a multi-line array or table
	)
	for i, ln := range strings.Split(src, "\n") {
		if inML != "" {
			if strings.Contains(ln, inML) {
				inML = ""
			}
			continue
		}
		if depth > 0 {
			depth += nesting(ln)
			continue
		}
		s := strings.TrimLeft(ln, " \t")
		switch {
		case s == "" || s[0] == '#':
		case strings.HasPrefix(s, "[["):
			p, rest, ok := parseKey(s[2:])
			if !ok || !strings.HasPrefix(rest, "]]") {
				continue
			}
			j := strings.Join(p, "\x00")
			elem, array, table = counts[j], p, p
			counts[j]++
			out = append(out, keyLine{p, elem, i + 1})
		case s[0] == '[':
			p, rest, ok := parseKey(s[1:])
			if !ok || !strings.HasPrefix(rest, "]") {
				continue
			}
			if len(p) <= len(array) || !slices.Equal(p[:len(array)], array) {
				array, elem = nil, -1
			}
			table = p
			out = append(out, keyLine{p, elem, i + 1})
		default:
			p, rest, ok := parseKey(s)
			if !ok || !strings.HasPrefix(rest, "=") {
				continue
			}
			full := append(slices.Clip(table), p...)
			out = append(out, keyLine{full, elem, i + 1})
			v := strings.TrimLeft(rest[1:], " \t")
			if inML = openMultiline(v); inML == "" {
				depth = nesting(v)
			}
		}
	}
	return out
}

// openMultiline returns the delimiter of a multi-line string that value
// opens and does not close on the same line, or "".
func openMultiline(value string) string {
	for _, d := range []string{`"""`, `'''`} {
		if strings.HasPrefix(value, d) && !strings.Contains(value[3:], d) {
			return d
		}
	}
	return ""
}

// nesting returns how many more brackets and braces s opens than it closes,
// outside strings and comments.
func nesting(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[', '{':
			n++
		case ']', '}':
			n--
		case '#':
			return n
		case '"', '\'':
			q := s[i]
			for i++; i < len(s) && s[i] != q; i++ {
				if q == '"' && s[i] == '\\' {
					i++
				}
			}
		}
	}
	return n
}

// parseKey reads a possibly dotted TOML key from the start of s and returns
// its pieces and the rest of s after any blanks.
func parseKey(s string) (pieces []string, rest string, ok bool) {
	for {
		s = strings.TrimLeft(s, " \t")
		var piece string
		switch {
		case strings.HasPrefix(s, `"`):
			end := 1
			for end < len(s) && s[end] != '"' {
				if s[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(s) {
				return nil, "", false
			}
			u, err := strconv.Unquote(s[:end+1])
			if err != nil {
				return nil, "", false
			}
			piece, s = u, s[end+1:]
		case strings.HasPrefix(s, "'"):
			end := strings.IndexByte(s[1:], '\'')
			if end < 0 {
				return nil, "", false
			}
			piece, s = s[1:end+1], s[end+2:]
		default:
			n := 0
			for n < len(s) && isBareKeyChar(s[n]) {
				n++
			}
			if n == 0 {
				return nil, "", false
			}
			piece, s = s[:n], s[n:]
		}
		pieces = append(pieces, piece)
		s = strings.TrimLeft(s, " \t")
		if !strings.HasPrefix(s, ".") {
			return pieces, s, true
		}
		s = s[1:]
	}
}

func isBareKeyChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// nthLine returns the line of the n-th (0-based) occurrence of path, or 0.
func nthLine(keys []keyLine, path []string, n int) int {
	for _, k := range keys {
		if slices.Equal(k.path, path) {
			if n == 0 {
				return k.line
			}
			n--
		}
	}
	return 0
}

// lineOf returns the line of path in array element elem (-1: any), or of its
// nearest enclosing table or header when path itself is absent, or 0.
func lineOf(keys []keyLine, path []string, elem int) int {
	for n := len(path); n > 0; n-- {
		for _, k := range keys {
			if (elem < 0 || k.elem == elem) && slices.Equal(k.path, path[:n]) {
				return k.line
			}
		}
	}
	return 0
}
