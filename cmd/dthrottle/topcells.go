package main

import (
	"strconv"
	"strings"

	"github.com/dthrottle/dthrottle/api"
)

// This file owns how dthrottle top writes text into cells: quoted tags,
// widths counted in columns, lines cut and padded to fit.

// quoted is s as a Go string literal: a tag's control characters, escape
// sequences and invisible characters are shown escaped, never sent to the
// terminal.
func quoted(s string) string { return strconv.Quote(s) }

// quotedTag is a tag of /v1/top quoted: one the daemon escaped (not
// valid UTF-8: its stray bytes as \xNN, its backslashes doubled) is read
// back into its bytes first, so that the byte 0xff shows as "\xff" and
// the text \xff as "\\xff".
func quotedTag(t api.TopTag) string {
	if !t.Escaped {
		return quoted(t.Tag)
	}
	var raw []byte
	for s := t.Tag; len(s) > 0; {
		n := 1 // bytes of s read
		switch {
		case strings.HasPrefix(s, `\\`):
			raw, n = append(raw, '\\'), 2
		case strings.HasPrefix(s, `\x`) && len(s) >= 4:
			if h, err := strconv.ParseUint(s[2:4], 16, 8); err == nil {
				raw, n = append(raw, byte(h)), 4
				break
			}
			raw = append(raw, s[0])
		default:
			raw = append(raw, s[0])
		}
		s = s[n:]
	}
	return quoted(string(raw))
}

// quotedName is a policy name as is, or quoted when it holds anything but
// printable characters and spaces.
func quotedName(s string) string {
	if q := strconv.Quote(s); q[1:len(q)-1] != s {
		return q
	}
	return s
}

// oneLine keeps an error message on one line of printable text.
func oneLine(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// cellWidth is how many columns r takes, counting wide characters as two
// (and anything that might be as two: a cut is then early, never late).
func cellWidth(r rune) int {
	if r < 0x1100 {
		return 1
	}
	return 2
}

// clip cuts s to at most width columns, ending a cut with "…".
func clip(s string, width int) string {
	w := 0
	for _, r := range s {
		w += cellWidth(r)
	}
	if w <= width {
		return s
	}
	w = 0
	for i, r := range s {
		if w+cellWidth(r) > width-1 {
			return s[:i] + "…"
		}
		w += cellWidth(r)
	}
	return s
}

// pad fills s with spaces to width columns.
func pad(s string, width int) string {
	w := 0
	for _, r := range s {
		w += cellWidth(r)
	}
	return s + strings.Repeat(" ", max(0, width-w))
}

// Terminal control: the alternate screen (the shell's screen comes back
// on exit), cursor hidden, home, erase to the end of the line and of the
// screen.
const (
	termEnter = "\x1b[?1049h\x1b[?25l"
	termLeave = "\x1b[?25h\x1b[?1049l"
	termHome  = "\x1b[H"
	termEOL   = "\x1b[K"
	termEOS   = "\x1b[J"
)
