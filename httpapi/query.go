package httpapi

import (
	"errors"
	"strconv"

	"github.com/dthrottle/dthrottle/bucket"
)

// maxCost is the largest cost one request may ask: the largest burst a
// configuration allows.
const maxCost = bucket.MaxBurst

// Errors of parseQuery, each answered 400 with its text.
var (
	errNoTag    = errors.New("missing tag parameter")
	errTwoTags  = errors.New("tag given twice")
	errTwoCosts = errors.New("cost given twice")
	errEscape   = errors.New("bad percent-encoding")
	errBadCost  = errors.New("cost must be an integer from 1 to " + strconv.Itoa(maxCost))
)

// parseQuery reads the tag and the cost from a raw query string, such as
// "tag=1.2.3.4&cost=2", without allocating: the tag's bytes are decoded
// (percent-escapes and '+' for a space, as in a form) and appended to
// buf[:0], which is returned. Parameters are separated by '&'; others than
// tag and cost are ignored; each of tag and cost may appear once. A
// missing cost is 1. An empty tag is valid.
func parseQuery(raw string, buf []byte) (tag []byte, cost int, err error) {
	var haveTag, haveCost bool
	cost = 1
	for raw != "" {
		var pair string
		pair, raw = cut(raw, '&')
		name, value := cut(pair, '=')
		switch paramName(name) {
		case "tag":
			if haveTag {
				return nil, 0, errTwoTags
			}
			haveTag = true
			if buf, err = unescape(buf[:0], value); err != nil {
				return nil, 0, err
			}
		case "cost":
			if haveCost {
				return nil, 0, errTwoCosts
			}
			haveCost = true
			n, err := strconv.Atoi(value)
			if err != nil || n < 1 || n > maxCost {
				return nil, 0, errBadCost
			}
			cost = n
		}
	}
	if !haveTag {
		return nil, 0, errNoTag
	}
	return buf, cost, nil
}

// paramName returns name decoded when it decodes to "tag" or "cost",
// else "" (so "t%61g" is the tag, as net/url reads it).
func paramName(name string) string {
	if name == "tag" || name == "cost" {
		return name
	}
	if len(name) > 12 {
		return ""
	}
	var a [12]byte
	b, err := unescape(a[:0], name)
	if err != nil {
		return ""
	}
	switch string(b) {
	case "tag":
		return "tag"
	case "cost":
		return "cost"
	}
	return ""
}

// cut splits s at the first sep, or returns s and "".
func cut(s string, sep byte) (before, after string) {
	for i := 0; i < len(s); i++ {
		if s[i] == sep {
			return s[:i], s[i+1:]
		}
	}
	return s, ""
}

// unescape appends s decoded as a form value to dst: "%XX" is the byte
// 0xXX, '+' a space.
func unescape(dst []byte, s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			if i+2 >= len(s) || !ishex(s[i+1]) || !ishex(s[i+2]) {
				return dst, errEscape
			}
			dst = append(dst, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
		case '+':
			dst = append(dst, ' ')
		default:
			dst = append(dst, c)
		}
	}
	return dst, nil
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}
