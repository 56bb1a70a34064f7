package httpapi

import (
	"errors"
	"math"
	"strconv"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// maxCost is the largest cost one request may ask: the largest burst a
// configuration allows.
const maxCost = bucket.MaxBurst

// Errors of parseQuery and parseCharge, each answered 400 with its text.
var (
	errNoTag     = errors.New("missing tag parameter")
	errTwoTags   = errors.New("tag given twice")
	errTwoCosts  = errors.New("cost given twice")
	errEscape    = errors.New("bad percent-encoding")
	errBadCost   = errors.New("cost must be an integer from 1 to " + strconv.Itoa(maxCost))
	errNoCharge  = errors.New("missing cost parameter: the tokens to charge")
	errBadCharge = errors.New("cost must be an integer from 0 to " + strconv.FormatUint(math.MaxUint32, 10))
)

// parseQuery reads the tag and the cost of GET /v1/allow from a raw query
// string, such as "tag=1.2.3.4&cost=2", without allocating: the tag's
// bytes are decoded (percent-escapes and '+' for a space, as in a form)
// and appended to buf[:0], which is returned. Parameters are separated by
// '&'; others than tag and cost are ignored; each of tag and cost may
// appear once. A missing cost is 1. An empty tag is valid.
func parseQuery(raw string, buf []byte) (tag []byte, cost int, err error) {
	tag, value, haveCost, err := scanQuery(raw, buf)
	if err != nil {
		return nil, 0, err
	}
	if !haveCost {
		return tag, 1, nil
	}
	n, err := strconv.Atoi(value)
	if err != nil || n < 1 || n > maxCost {
		return nil, 0, errBadCost
	}
	return tag, n, nil
}

// parseCharge reads the tag and the cost of POST /v1/charge as
// parseQuery does, except that the cost is required and may be any
// number of tokens from 0 to 2^32-1: a charge is never refused, so the
// burst does not bound it.
func parseCharge(raw string, buf []byte) (tag []byte, cost uint32, err error) {
	tag, value, haveCost, err := scanQuery(raw, buf)
	if err != nil {
		return nil, 0, err
	}
	if !haveCost {
		return nil, 0, errNoCharge
	}
	n, err := strconv.ParseUint(value, 10, 32)
	if err != nil {
		return nil, 0, errBadCharge
	}
	return tag, uint32(n), nil
}

// scanQuery finds the tag and the cost in a raw query string: the tag
// decoded into buf[:0], the cost's value as written.
func scanQuery(raw string, buf []byte) (tag []byte, cost string, haveCost bool, err error) {
	var haveTag bool
	for raw != "" {
		var pair string
		pair, raw = cut(raw, '&')
		name, value := cut(pair, '=')
		switch paramName(name) {
		case "tag":
			if haveTag {
				return nil, "", false, errTwoTags
			}
			haveTag = true
			if buf, err = unescape(buf[:0], value); err != nil {
				return nil, "", false, err
			}
		case "cost":
			if haveCost {
				return nil, "", false, errTwoCosts
			}
			cost, haveCost = value, true
		}
	}
	if !haveTag {
		return nil, "", false, errNoTag
	}
	return buf, cost, haveCost, nil
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
