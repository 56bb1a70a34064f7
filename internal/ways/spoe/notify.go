package spoe

import (
	"math"
	"net/netip"
	"strconv"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/ways/rlheader"
)

// The variables an ACK sets, in the transaction's scope, for each message
// decided. HAProxy puts the agent's var-prefix before them:
// txn.dthrottle.allowed with "option var-prefix dthrottle".
const (
	varAllowed    = "allowed"          // 1 served, 0 refused
	varRetryAfter = "retry_after"      // refused: seconds until the same request would be served
	varRateLimit  = "ratelimit"        // the RateLimit field's value
	varPolicy     = "ratelimit_policy" // the RateLimit-Policy field's value
	varDryRun     = "dry_run"          // under a dry-run policy: "served" or "refused"
)

// Arguments a message is read for. Any other argument is ignored.
const (
	argTag  = "tag"  // the throttling tag; without it, the first argument
	argCost = "cost" // tokens to spend, 1 to MaxCost; 1 without it
)

// MaxCost is the most tokens one message may spend, as on the HTTP
// endpoint: the largest burst a configuration allows.
const MaxCost = bucket.MaxBurst

// notify decides every message of a NOTIFY frame and appends its ACK.
// A message that cannot be decided (no argument, a cost out of range, an
// argument of a type no tag is made of) is counted as bad and gets no
// variables, which the shipped configuration serves (fail open). The ACK
// never passes the agreed frame size: a message whose variables would not
// fit gets only txn.<prefix>.allowed, and one for which even that has no
// room is not decided.
func (c *conn) notify(now time.Time, h header, p []byte) int {
	var err error
	if c.msgs, err = readMessages(p, c.msgs); err != nil {
		return c.bad(statusInvalid)
	}
	b, at := beginFrame(c.out, frameAck, h.streamID, h.frameID)
	for i := range c.msgs {
		tag, cost, ok := c.tagOf(&c.msgs[i])
		if !ok || len(b)-at-4+minActions > c.maxFrame {
			c.c.bad++
			continue
		}
		mark := len(b)
		v := c.s.decide.AllowN(now, tag, cost)
		if b = c.actions(b, v); len(b)-at-4 > c.maxFrame {
			b = appendSetInt(b[:mark], varAllowed, allowedValue(v))
		}
	}
	c.out = endFrame(b, at)
	return -1
}

// minActions is the size of the smallest answer: txn.<prefix>.allowed.
var minActions = len(appendSetInt(nil, varAllowed, 0))

// tagOf finds a message's tag and cost. The tag is the argument named
// "tag", or else the first one: a string or binary as it is, an address
// as text ("192.0.2.1", "2001:db8::1"), an integer in decimal; NULL (a
// sample HAProxy could not fetch) is the empty tag, served unaccounted.
func (c *conn) tagOf(m *message) (tag []byte, cost int, ok bool) {
	if len(m.args) == 0 {
		return nil, 0, false
	}
	cost = 1
	t := &m.args[0]
	for i := range m.args {
		a := &m.args[i]
		switch string(a.name) {
		case argTag:
			t = a
		case argCost:
			if !isInt(a.v.typ) || a.v.num < 1 || a.v.num > MaxCost {
				return nil, 0, false
			}
			cost = int(a.v.num)
		}
	}
	v := t.v
	switch v.typ {
	case typeString, typeBinary:
		return v.bytes, cost, true
	case typeNull:
		return nil, cost, true
	case typeIPv4:
		c.tag = netip.AddrFrom4([4]byte(v.bytes)).AppendTo(c.tag[:0])
	case typeIPv6:
		c.tag = netip.AddrFrom16([16]byte(v.bytes)).AppendTo(c.tag[:0])
	case typeInt32, typeInt64:
		c.tag = strconv.AppendInt(c.tag[:0], signed(v), 10)
	case typeUint32, typeUint64:
		c.tag = strconv.AppendUint(c.tag[:0], v.num, 10)
	default:
		return nil, 0, false
	}
	return c.tag, cost, true
}

func isInt(t byte) bool { return t >= typeInt32 && t <= typeUint64 }

// signed is a signed integer's value: HAProxy writes a negative one as
// its two's complement, a 64-bit varint.
func signed(v value) int64 {
	if v.typ == typeInt32 {
		return int64(int32(uint32(v.num)))
	}
	return int64(v.num)
}

// actions counts a verdict and appends the set-var actions that carry
// it.
func (c *conn) actions(b []byte, v bucket.Verdict) []byte {
	if v.Allowed {
		c.c.allowed++
	} else {
		c.c.refused++
	}
	b = appendSetInt(b, varAllowed, allowedValue(v))
	if v.Policy.Action == bucket.Limit && v.Policy.Name != "" {
		c.val = rlheader.AppendPolicy(c.val[:0], v.Policy)
		b = appendSetString(b, varPolicy, c.val)
		c.val = rlheader.AppendRateLimit(c.val[:0], v)
		b = appendSetString(b, varRateLimit, c.val)
		if s, ok := rlheader.RetryAfter(v); ok {
			b = appendSetInt(b, varRetryAfter, int32(min(s, math.MaxInt32)))
		}
	}
	if v.Policy.DryRun {
		dry := dryServed
		if v.WouldRefuse {
			dry = dryRefused
			c.c.dryRun++
		}
		b = appendSetString(b, varDryRun, dry)
	}
	return b
}

// allowedValue is txn.<prefix>.allowed: 1 served, 0 refused.
func allowedValue(v bucket.Verdict) int32 {
	if v.Allowed {
		return 1
	}
	return 0
}

var dryServed, dryRefused = []byte("served"), []byte("refused")

// appendSetInt appends a set-var action of a transaction's int variable.
func appendSetInt(b []byte, name string, v int32) []byte {
	b = append(b, actionSetVar, 3, scopeTxn)
	b = appendString(b, name)
	return appendTypedInt32(b, v)
}

// appendSetString appends a set-var action of a transaction's string
// variable.
func appendSetString(b []byte, name string, v []byte) []byte {
	b = append(b, actionSetVar, 3, scopeTxn)
	b = appendString(b, name)
	return appendTypedString(b, v)
}
