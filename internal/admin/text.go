package admin

import (
	"bytes"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/dthrottle/dthrottle/api"
)

// This file owns how tags, which are any bytes, become text: in the JSON
// documents (printable, then jsonSafe over the whole document) and on the
// status page (shown). Both are unambiguous: no two tags look alike.

// printable returns a tag for a JSON string. A tag of valid UTF-8 is
// itself (jsonSafe escapes its invisible characters the JSON way, which
// decodes back to the same text). A tag that is not valid UTF-8 has each
// byte that is not part of a character written \xNN and each backslash
// doubled, so that a tag holding the text \xff never reads as one holding
// the byte; escaped reports which was done. Tags are opaque bytes, and a
// long tag's digest key ends in raw bytes.
func printable(s string) (text string, escaped bool) {
	if utf8.ValidString(s) {
		return s, false
	}
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case r == '\\':
			b.WriteString(`\\`)
		default:
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String(), true
}

// printableText is printable's text alone.
func printableText(s string) string {
	t, _ := printable(s)
	return t
}

// shown returns a tag as text a reader can see and tell from any other:
// a backslash as \\, bytes that are not valid UTF-8 as \xNN, and
// characters that print nothing, or move or reshape the text (controls,
// DEL, C1, format characters such as bidi overrides and zero-width
// spaces) as \xNN or \uNNNN. The page's template escapes the result as
// HTML. A tag that printable escaped (escaped) keeps its escapes.
func shown(tag string, escaped bool) string {
	if !strings.ContainsFunc(tag, notShown) && (escaped || !strings.Contains(tag, `\`) && utf8.ValidString(tag)) {
		return tag
	}
	var b strings.Builder
	for len(tag) > 0 {
		r, n := utf8.DecodeRuneInString(tag)
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, tag[0])
		case r == '\\' && !escaped:
			b.WriteString(`\\`)
		case !notShown(r):
			b.WriteString(tag[:n])
		case r < utf8.RuneSelf:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		tag = tag[n:]
	}
	return b.String()
}

// visibleTop is shown for a tag of a Top document, which printable
// may have escaped already.
func visibleTop(t api.TopTag) string { return shown(t.Tag, t.Escaped) }

// notShown reports a character a terminal or a page would not show as a
// glyph of its own.
func notShown(r rune) bool { return !unicode.IsGraphic(r) || unicode.Is(unicode.Cf, r) }

// jsonSafe rewrites the characters of a marshalled JSON document that a
// terminal would not show as themselves (DEL, C1 controls, format
// characters such as bidi overrides and zero-width spaces, and any other
// that is not graphic) as \uNNNN escapes. encoding/json already escapes
// the C0 controls; these it leaves raw. The document means the same:
// only its spelling changes, so curl in a terminal shows the escapes.
func jsonSafe(doc []byte) []byte {
	i := bytes.IndexFunc(doc, func(r rune) bool { return r >= 0x7f && notShown(r) })
	if i < 0 {
		return doc
	}
	out := append(make([]byte, 0, len(doc)+16), doc[:i]...)
	for rest := doc[i:]; len(rest) > 0; {
		r, n := utf8.DecodeRune(rest)
		switch {
		case r == utf8.RuneError && n == 1, r < 0x7f || !notShown(r):
			out = append(out, rest[:n]...)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		default:
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		rest = rest[n:]
	}
	return out
}
