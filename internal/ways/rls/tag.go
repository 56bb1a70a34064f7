package rls

import (
	"fmt"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// A descriptor's tag is
//
//	rls:<domain>|<key>=<value>|<key>=<value>...
//
// the request's domain, then each entry of the descriptor in order (the
// charge entry left out), with '%', '|' and '=' in the domain, keys and
// values written %25, %7C and %3D. '|' and '=' then appear only between
// the parts, so a tag reads back into one domain and one list of entries:
// no two descriptors share a tag. A [[policy]] prefix such as
// "rls:api|generic_key=upload" matches the descriptors of domain api
// whose first entry is generic_key=upload, or starts with it (upload2),
// or that have more entries after it.

// tagPrefix starts every tag the service makes.
const tagPrefix = "rls:"

// appendEscaped appends s with '%', '|' and '=' percent-escaped.
func appendEscaped(b []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%', '|', '=':
			b = append(b, '%', hex[c>>4], hex[c&15])
		default:
			b = append(b, c)
		}
	}
	return b
}

// item is one descriptor of a request: its tag, where it lies in the
// request's buffer, its cost, and then what was decided for it.
type item struct {
	start, end int    // the tag: buf[start:end]
	cost       uint64 // hits_addend in effect: the descriptor's, else the request's (1 when it has none)
	charge     bool   // the descriptor holds the charge entry
	stated     bool   // the descriptor states its limit (its limit field): quota, not its policy, applies
	quota      bucket.Quota
	outcome
	v bucket.Verdict // the decision, or the bucket's level when none was taken
}

// request is one request read: its descriptors' tags in one buffer. A
// request is reused through a pool.
type request struct {
	buf   []byte
	items []item
	// the RateLimit-Policy and RateLimit values of the answer
	policies, limits []byte
}

// tag returns the tag of it, in r's buffer.
func (r *request) tag(it *item) []byte { return r.buf[it.start:it.end] }

// badRequest is a request the service does not decide: answered
// INVALID_ARGUMENT with its text.
type badRequest string

func (e badRequest) Error() string { return string(e) }

func bad(format string, args ...any) error { return badRequest(fmt.Sprintf(format, args...)) }

// read checks req against the limits of a request and makes each
// descriptor's item, its tag in r.buf. chargeKey is the charge entry's
// key, "" for none. It returns a badRequest for a request over a limit,
// having decided nothing.
func (r *request) read(req *rlsv3.RateLimitRequest, chargeKey string) error {
	domain, ds := req.GetDomain(), req.GetDescriptors()
	switch {
	case domain == "":
		return bad("domain: empty")
	case len(domain) > MaxStringBytes:
		return bad("domain: %d bytes, at most %d", len(domain), MaxStringBytes)
	case len(ds) == 0:
		return bad("descriptors: none")
	case len(ds) > MaxDescriptors:
		return bad("descriptors: %d, at most %d", len(ds), MaxDescriptors)
	}
	cost := uint64(req.GetHitsAddend())
	if cost == 0 {
		cost = 1 // unset: proto3 cannot tell 0 from absent
	}
	r.buf, r.items = r.buf[:0], r.items[:0]
	for i, d := range ds {
		it, err := r.descriptor(i, d, domain, cost, chargeKey)
		if err != nil {
			return err
		}
		r.items = append(r.items, it)
	}
	return nil
}

// descriptor checks descriptor i and appends its tag.
func (r *request) descriptor(i int, d *rlcommon.RateLimitDescriptor, domain string, cost uint64, chargeKey string) (item, error) {
	es := d.GetEntries()
	switch {
	case len(es) == 0:
		return item{}, bad("descriptors[%d]: no entries", i)
	case len(es) > MaxEntries:
		return item{}, bad("descriptors[%d]: %d entries, at most %d", i, len(es), MaxEntries)
	case d.GetIsNegativeHits():
		return item{}, bad("descriptors[%d].is_negative_hits: tokens are never given back", i)
	}
	it := item{start: len(r.buf), cost: cost}
	if h := d.GetHitsAddend(); h != nil {
		it.cost = h.GetValue()
	}
	if l := d.GetLimit(); l != nil {
		q, err := quotaOf(l)
		if err != nil {
			return item{}, bad("descriptors[%d].limit: %v", i, err)
		}
		it.quota, it.stated = q, true
	}
	r.buf = appendEscaped(append(r.buf, tagPrefix...), domain)
	bare := len(r.buf)
	for j, e := range es {
		k, v := e.GetKey(), e.GetValue()
		switch {
		case k == "":
			return item{}, bad("descriptors[%d].entries[%d].key: empty", i, j)
		case len(k) > MaxStringBytes:
			return item{}, bad("descriptors[%d].entries[%d].key: %d bytes, at most %d", i, j, len(k), MaxStringBytes)
		case len(v) > MaxStringBytes:
			return item{}, bad("descriptors[%d].entries[%d].value: %d bytes, at most %d", i, j, len(v), MaxStringBytes)
		case k == chargeKey:
			it.charge = true
			continue
		}
		r.buf = append(r.buf, '|')
		r.buf = appendEscaped(r.buf, k)
		r.buf = append(r.buf, '=')
		r.buf = appendEscaped(r.buf, v)
	}
	if len(r.buf) == bare {
		// A charge of nothing but the domain: as a descriptor without
		// entries, it names no client.
		return item{}, bad("descriptors[%d]: no entries but the charge entry (%s)", i, chargeKey)
	}
	it.end = len(r.buf)
	return it, nil
}
