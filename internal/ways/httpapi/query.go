package httpapi

import (
	"errors"
	"math"
	"strconv"
	"strings"

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
	errBadCost   = errors.New("cost must be an integer from 1 to " + strconv.Itoa(maxCost) + ", or 0 (read only) with a stated limit")
	errNoCharge  = errors.New("missing cost parameter: the tokens to charge")
	errBadCharge = errors.New("cost must be an integer from 0 to " + strconv.FormatUint(math.MaxUint32, 10))
)

// The parameters of GET /v1/allow besides tag, by their index in params:
// the cost, and those that state a limit (stated.go).
const (
	pCost = iota
	pLimit
	pPer
	pRate
	pBurst
	pAlgorithm
	nParams
	pTag     = nParams // the tag, which scanQuery decodes into a buffer
	pUnknown = -1      // any other parameter, ignored
)

// paramNames are the names of the parameters, by index.
var paramNames = [nParams]string{"cost", "limit", "per", "rate", "burst", "algorithm"}

// errTwice is the error of a parameter given twice, by index.
var errTwice = [nParams]error{errTwoCosts,
	errors.New("limit given twice"), errors.New("per given twice"), errors.New("rate given twice"),
	errors.New("burst given twice"), errors.New("algorithm given twice")}

// params are the values of a query's parameters as written (not
// decoded), by index, and which of them it gives.
type params struct {
	v   [nParams]string
	has [nParams]bool
}

// query is GET /v1/allow's request: the tag, the tokens it costs, and the
// limit it states, if any.
type query struct {
	tag    []byte
	cost   int            // from 1 to maxCost; 0 (read only) with a stated limit
	stated bool           // the query states a limit: req, not the tag's policy, applies
	req    bucket.Request // the stated limit and the cost as its Hits
}

// parseQuery reads GET /v1/allow's query from a raw query string, such
// as "tag=1.2.3.4&cost=2" or "tag=k&limit=1000&per=24h", without
// allocating: the tag's bytes are decoded (percent-escapes and '+' for a
// space, as in a form) and appended to buf[:0]. Parameters are separated
// by '&'; others than tag, cost and the stated limit's (stated.go) are
// ignored; each may appear once. A missing cost is 1. An empty tag is
// valid.
func parseQuery(raw string, buf []byte) (query, error) {
	tag, p, err := scanQuery(raw, buf)
	if err != nil {
		return query{}, err
	}
	q := query{tag: tag, cost: 1}
	if q.req.Quota, q.stated, err = parseStated(&p); err != nil {
		return query{}, err
	}
	if p.has[pCost] {
		n, err := strconv.Atoi(p.v[pCost])
		if err != nil || n < 0 || n > maxCost || n == 0 && !q.stated {
			return query{}, errBadCost
		}
		q.cost = n
	}
	q.req.Hits = q.cost
	return q, nil
}

// parseCharge reads the tag and the cost of POST /v1/charge as
// parseQuery does, except that the cost is required and may be any
// number of tokens from 0 to 2^32-1: a charge is never refused, so the
// burst does not bound it.
func parseCharge(raw string, buf []byte) (tag []byte, cost uint32, err error) {
	tag, p, err := scanQuery(raw, buf)
	if err != nil {
		return nil, 0, err
	}
	if !p.has[pCost] {
		return nil, 0, errNoCharge
	}
	n, err := strconv.ParseUint(p.v[pCost], 10, 32)
	if err != nil {
		return nil, 0, errBadCharge
	}
	return tag, uint32(n), nil
}

// scanQuery finds the tag and the other parameters in a raw query
// string: the tag decoded into buf[:0], the others' values as written.
func scanQuery(raw string, buf []byte) (tag []byte, p params, err error) {
	var haveTag bool
	for raw != "" {
		var pair string
		pair, raw = cut(raw, '&')
		name, value := cut(pair, '=')
		switch i := param(name); i {
		case pUnknown:
		case pTag:
			if haveTag {
				return nil, p, errTwoTags
			}
			haveTag = true
			if buf, err = unescape(buf[:0], value); err != nil {
				return nil, p, err
			}
		default:
			if p.has[i] {
				return nil, p, errTwice[i]
			}
			p.v[i], p.has[i] = value, true
		}
	}
	if !haveTag {
		return nil, p, errNoTag
	}
	return buf, p, nil
}

// param returns the index of the parameter name names, decoded (so
// "t%61g" is the tag, as net/url reads it), or pUnknown.
func param(name string) int {
	switch name { // the common case first: tag and cost as written
	case "tag":
		return pTag
	case "cost":
		return pCost
	}
	for i, n := range paramNames {
		if name == n {
			return i
		}
	}
	if len(name) > 3*len("algorithm") || strings.IndexByte(name, '%') < 0 {
		return pUnknown
	}
	var a [3 * len("algorithm")]byte
	b, err := unescape(a[:0], name)
	if err != nil {
		return pUnknown
	}
	if string(b) == "tag" {
		return pTag
	}
	for i, n := range paramNames {
		if string(b) == n {
			return i
		}
	}
	return pUnknown
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
