package config

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dthrottle/dthrottle/internal/limits"
	"github.com/dthrottle/dthrottle/internal/shortdur"
)

// This file declares, once, what each key may hold. Validate checks a
// numeric key against its span and an enumerated key against its choice,
// and words its errors from them; the reference in docs/configuration.md
// prints the same rules, beside each key's default (from Default) and
// whether a reload changes it (from the key's reload tag), and
// TestReferenceIsCurrent fails when the page no longer says what this
// package does.

// rule is what one key may hold: a span for a numeric key, a choice for an
// enumerated one, and text for what code checks beyond them, or for all of
// it on a key with neither. A true-or-false key needs no rule.
type rule struct {
	span   *span
	choice *choice
	text   string // the rest of the rule, in words, as the reference gives it
	dflt   string // the default as the reference gives it, where Default's value depends on the machine or the key is in an array of tables
}

// span is the allowed range of a numeric key, both bounds included; a
// duration's bounds are in nanoseconds.
type span struct {
	lo, hi         float64
	loNote, hiNote string // said after a bound: "0 (hold nothing back)"
	unit           string // said after the range: "(tokens per second)"
}

// choice lists the values an enumerated key may hold.
type choice struct {
	values []string          // as written in TOML, quotes left out
	ints   bool              // the values are integers: written without quotes
	notes  map[string]string // said after a value: 403 "(for nginx auth_request)"
	oneOf  bool              // errors say `one of "a", "b", "c"` rather than `"a", "b" or "c"`
}

// tokensPerSecond is the range of every rate.
var tokensPerSecond = &span{lo: minRate, hi: maxRate, unit: "(tokens per second)"}

// quotaChoice is what a policy lets callers state for its tags.
var quotaChoice = &choice{values: []string{QuotasAny, QuotasLower, QuotasNone}, oneOf: true}

// rules holds the rule of every key, by its dotted name ("policy.rate" for
// the key in every [[policy]]); "policy" is the array of tables itself.
var rules = map[string]rule{
	"listen.unix": {
		text: fmt.Sprintf(`a path of at most %d bytes (the kernel's limit for a socket path), no NUL, in a directory that exists; listen.unix or listen.tcp must be set; its file and its lock file (the path and ".lock") named by no other key`, maxUnixPath),
		dflt: `"$XDG_RUNTIME_DIR/dthrottle.sock", else "/tmp/dthrottle-<uid>.sock"`,
	},
	"listen.unix_mode":     {text: `3 or 4 octal digits, "0000" to "0777"`},
	"listen.unix_group":    {text: "a group name"},
	"listen.tcp":           {text: `"host:port" (an empty host listens on every interface, port 0 picks a free port)`},
	"listen.charge_unix":   {text: fmt.Sprintf(`a path of at most %d bytes, no NUL, in a directory that exists; another file than every other socket, their lock files and state.file`, maxUnixPath)},
	"listen.charge_tcp":    {text: `"host:port"; another address than listen.tcp, admin.http, http.listen and spoe.listen`},
	"listen.max_conns":     {span: &span{lo: 1, hi: maxMaxConns}},
	"listen.max_tag_bytes": {span: &span{lo: minMaxTagBytes, hi: maxMaxTagBytes}},

	"limit.rate":     {span: tokensPerSecond, text: "or leave it out and set limit with per"},
	"limit.burst":    {span: &span{lo: 1, hi: maxBurst}, text: "refilling within 73 years at the rate; with limit and per, unset means limit"},
	"limit.limit":    {span: &span{lo: 1, hi: maxBurst, unit: "(requests per per)"}, text: "with per, in place of rate", dflt: "none: rate is used"},
	"limit.per":      {span: &span{lo: float64(minPer), hi: float64(maxPer)}, text: "with limit", dflt: "none: rate is used"},
	"limit.quotas":   {choice: quotaChoice},
	"limit.max_tags": {span: &span{lo: 1, hi: maxMaxTags}},

	"policy":        {text: fmt.Sprintf("at most %d policies", limits.MaxPolicies)},
	"policy.name":   {text: "unique among the policies", dflt: "the prefix"},
	"policy.prefix": {text: "not empty, no newline, unique among the policies", dflt: "none: required"},
	"policy.rate":   {span: tokensPerSecond, text: `with action "limit", or limit with per in its place; unused otherwise`, dflt: `none: rate, or limit with per, required for "limit"`},
	"policy.burst":  {span: &span{lo: 1, hi: maxBurst}, text: `with action "limit", refilling within 73 years at the rate; unused otherwise`, dflt: `none: required with rate; limit with limit and per`},
	"policy.limit":  {span: &span{lo: 1, hi: maxBurst, unit: "(requests per per)"}, text: `with per, in place of rate (action "limit")`, dflt: "none: rate is used"},
	"policy.per":    {span: &span{lo: float64(minPer), hi: float64(maxPer)}, text: "with limit", dflt: "none: rate is used"},
	"policy.quotas": {choice: quotaChoice, dflt: `"any"`},
	"policy.action": {choice: &choice{values: []string{ActionLimit, ActionAllow, ActionDeny}, oneOf: true}, dflt: `"limit"`},
	"policy.partition": {choice: &choice{values: []string{"", PartitionWhole, PartitionShare}, oneOf: true},
		text: `"" takes gossip.partition`, dflt: `""`},

	"gossip.interval":    {span: &span{lo: float64(minInterval), hi: float64(maxInterval)}},
	"gossip.group":       {text: `"group:port", an IPv4 multicast address (224.0.0.0/4) and a port from 1`},
	"gossip.interface":   {text: fmt.Sprintf(`an interface name of at most %d bytes, no "/" or blanks`, maxIfName)},
	"gossip.ttl":         {span: &span{lo: 0, hi: maxTTL}},
	"gossip.peers":       {text: `each "host:port" with a host and a port from 1, and each once`},
	"gossip.bind":        {text: `"host:port"; another port than gossip.group's when both a group and peers are set`},
	"gossip.secret_file": {text: `a file of at least 16 bytes (white space around it not counted) that others cannot read, checked whenever it is read`},
	"gossip.max_packet":  {span: &span{lo: minMaxPacket, hi: maxMaxPacket}},
	"gossip.max_peers":   {span: &span{lo: 0, hi: maxMaxPeers}},
	"gossip.partition":   {choice: &choice{values: []string{PartitionWhole, PartitionShare}}},
	"gossip.forget_after": {span: &span{lo: float64(minForgetAfter), hi: float64(maxForgetAfter)},
		text: "longer than the silence timeout (3 intervals, and at least one second more than one) when a policy is under \"share\""},

	"relay.mode": {choice: &choice{values: []string{RelayOff, RelayUse, RelayServe}},
		text: `"use" and "serve" need gossip.group or gossip.peers`},
	"relay.hold":  {span: &span{lo: 0, hi: 1, loNote: "(hold nothing back)", hiNote: "(a whole burst)"}},
	"relay.peers": {text: `each "host:port" with a host and a port from 1, and each once; only with mode = "serve"`},
	"relay.bind":  {text: `"host:port"; with mode = "serve", another port than gossip.group's and gossip.bind's`},

	"admin.http": {text: `"host:port"`},

	"http.listen":    {text: fmt.Sprintf(`"host:port", or "unix:/path" with a path of at most %d bytes in a directory that exists; another address than admin.http, another file than every other socket, their lock files and state.file`, maxUnixPath)},
	"http.max_conns": {span: &span{lo: 1, hi: maxHTTPConns}},
	"http.refuse_status": {choice: &choice{values: []string{"403", "429"}, ints: true,
		notes: map[string]string{"403": "(for nginx auth_request)"}}},

	"spoe.listen":    {text: fmt.Sprintf(`"host:port", or "unix:/path" with a path of at most %d bytes in a directory that exists; another address than admin.http, http.listen and listen.tcp, another file than every other socket, their lock files and state.file`, maxUnixPath)},
	"spoe.max_conns": {span: &span{lo: 1, hi: maxSPOEConns}},

	"rls.listen":     {text: fmt.Sprintf(`"host:port", or "unix:/path" with a path of at most %d bytes in a directory that exists; another address than every other listener's (listen.tcp, listen.charge_tcp, admin.http, http.listen, spoe.listen), another file than every other socket, their lock files and state.file`, maxUnixPath)},
	"rls.max_conns":  {span: &span{lo: 1, hi: maxRLSConns}},
	"rls.unmatched":  {choice: &choice{values: []string{UnmatchedLimit, UnmatchedOK}}},
	"rls.charge_key": {text: fmt.Sprintf("at most %d bytes", maxRLSChargeKey)},
	// The requests in progress on all connections together.
	"rls.max_requests": {span: &span{lo: 1, hi: maxRLSRequests}},

	"gubernator.grpc":         {text: `"host:port"; another address than every other listener's (listen.tcp, listen.charge_tcp, admin.http, http.listen, spoe.listen, rls.listen) and than gubernator.http`},
	"gubernator.http":         {text: `"host:port"; another address than every other listener's (listen.tcp, listen.charge_tcp, admin.http, http.listen, spoe.listen, rls.listen) and than gubernator.grpc`},
	"gubernator.max_conns":    {span: &span{lo: 1, hi: maxGubernatorConns}},
	"gubernator.max_requests": {span: &span{lo: 1, hi: maxGubernatorRequests}},

	"log.format": {choice: &choice{values: []string{"text", "json"}}},
	"log.level":  {choice: &choice{values: []string{"debug", "info", "warn", "error"}, oneOf: true}},

	"state.file": {text: `a file, not a directory, no NUL; another file than every socket, their lock files and the config file`},
}

// ruleOf returns the rule of the key k names. It panics on a key without
// the rule its caller needs: a check in Validate that rules does not back.
func ruleOf(k keyRef) rule {
	name := strings.Join(k.path, ".")
	r, ok := rules[name]
	if !ok {
		panic("config: no rule for " + name)
	}
	return r
}

// words says the span for kind k, as errors do with from "between " and
// and " and ", as the reference does with "" and " to ".
func (s span) words(k kind, from, and string) string {
	return from + number(k, s.lo) + note(s.loNote) + and + number(k, s.hi) + note(s.hiNote) + note(s.unit)
}

func (s span) has(v float64) bool { return v >= s.lo && v <= s.hi } // false for NaN

// words lists the values: `"text" or "json"`, or `one of "a", "b", "c"`.
func (c choice) words() string {
	vs := make([]string, len(c.values))
	for i, v := range c.values {
		vs[i] = v
		if !c.ints {
			vs[i] = strconv.Quote(v)
		}
		vs[i] += note(c.notes[v])
	}
	if c.oneOf || len(vs) < 2 {
		return "one of " + strings.Join(vs, ", ")
	}
	return strings.Join(vs[:len(vs)-1], ", ") + " or " + vs[len(vs)-1]
}

func note(s string) string {
	if s == "" {
		return ""
	}
	return " " + s
}

// number writes a bound of a key of kind k: 1000000, 0.000001, 1e9, 10ms.
func number(k kind, v float64) string {
	switch k {
	case kindInt:
		return strconv.FormatInt(int64(v), 10)
	case kindDuration:
		return shortdur.Format(time.Duration(v))
	}
	if math.Abs(v) >= 1e6 {
		s := strconv.FormatFloat(v, 'g', -1, 64) // 1e+09
		return strings.Replace(strings.Replace(s, "e+0", "e", 1), "e+", "e", 1)
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// intRange checks an integer key against its span.
func intRange(k keyRef, v int) *Error {
	s := ruleOf(k).span
	if s.has(float64(v)) {
		return nil
	}
	return bad(k, strconv.Itoa(v), "must be "+s.words(kindInt, "between ", " and "))
}

// floatRange checks a number key against its span.
func floatRange(k keyRef, v float64) *Error {
	s := ruleOf(k).span
	if s.has(v) {
		return nil
	}
	return bad(k, strconv.FormatFloat(v, 'g', -1, 64), "must be "+s.words(kindFloat, "between ", " and "))
}

// durationRange checks a duration key against its span.
func durationRange(k keyRef, d time.Duration) *Error {
	s := ruleOf(k).span
	if s.has(float64(d)) {
		return nil
	}
	return bad(k, quote(d.String()), "must be "+s.words(kindDuration, "between ", " and "))
}

// oneOf checks an enumerated key's value v against its choice; shown is v
// as the error gives it.
func oneOf(k keyRef, v, shown string) *Error {
	c := ruleOf(k).choice
	if slices.Contains(c.values, v) {
		return nil
	}
	return bad(k, shown, "must be "+c.words())
}
