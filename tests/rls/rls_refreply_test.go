package rls

import (
	"bytes"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// This file owns reading what the reference client prints: a
// RateLimitResponse in protobuf's text format.

// rlsStatus is one descriptor's status in a reply.
type rlsStatus struct {
	code      string
	limit     *rlsLimit // nil when the reply states none
	remaining uint64
	reset     time.Duration
}

// rlsLimit is a reply's current_limit: perUnit requests per multiplier
// units (multiplier 0 when absent, meaning 1).
type rlsLimit struct {
	perUnit    uint64
	unit       string
	multiplier uint64
}

// perSecond is the limit's rate in requests per second.
func (l rlsLimit) perSecond(t *testing.T) float64 {
	t.Helper()
	secs := map[string]float64{"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400, "WEEK": 7 * 86400}[l.unit]
	if secs == 0 {
		t.Fatalf("current_limit unit %q", l.unit)
	}
	return float64(l.perUnit) / (secs * float64(max(l.multiplier, 1)))
}

// rlsReply is what the reference client printed.
type rlsReply struct {
	overall  string
	statuses []rlsStatus
}

// askRLS runs the reference client once against addr: one call of
// domain with one descriptor per element of descriptors (each
// "key=value,key=value").
func askRLS(t *testing.T, client, addr, domain string, descriptors ...string) rlsReply {
	t.Helper()
	args := []string{"-dial_string", addr, "-domain", domain}
	for _, d := range descriptors {
		args = append(args, "-descriptors", d)
	}
	cmd := exec.Command(client, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("client_cmd %v: %v\n%s", args, err, out.String())
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("client_cmd %v: no answer within 20s\n%s", args, out.String())
	}
	text, found := "", false
	for _, line := range strings.Split(out.String(), "\n") {
		if s, ok := strings.CutPrefix(line, "response:"); ok {
			text, found = s, true
		}
	}
	if !found {
		t.Fatalf("client_cmd %v printed no response:\n%s", args, out.String())
	}
	msg, err := parseProtoText(text)
	if err != nil {
		t.Fatalf("client_cmd %v: %v in %q", args, err, text)
	}
	return rlsReplyOf(t, msg)
}

// rlsReplyOf reads a RateLimitResponse from its text form. Fields at their
// zero value are absent from it: no limit_remaining means 0.
func rlsReplyOf(t *testing.T, m protoText) rlsReply {
	t.Helper()
	r := rlsReply{overall: m.scalar("overall_code")}
	for _, s := range m.msgs("statuses") {
		st := rlsStatus{code: s.scalar("code")}
		st.remaining = s.uint(t, "limit_remaining")
		if ls := s.msgs("current_limit"); len(ls) > 0 {
			st.limit = &rlsLimit{perUnit: ls[0].uint(t, "requests_per_unit"), unit: ls[0].scalar("unit")}
			if ms := ls[0].msgs("unit_multiplier"); len(ms) > 0 {
				st.limit.multiplier = ms[0].uint(t, "value")
			}
		}
		if ds := s.msgs("duration_until_reset"); len(ds) > 0 {
			st.reset = time.Duration(ds[0].uint(t, "seconds"))*time.Second + time.Duration(ds[0].uint(t, "nanos"))
		}
		r.statuses = append(r.statuses, st)
	}
	if r.overall == "" {
		r.overall = "UNKNOWN"
	}
	for i := range r.statuses {
		if r.statuses[i].code == "" {
			r.statuses[i].code = "UNKNOWN"
		}
	}
	return r
}

// protoText is a message in protobuf's text format: each field's values,
// in order, each a scalar or a message.
type protoText map[string][]protoValue

type protoValue struct {
	scalar string
	msg    protoText
}

func (m protoText) scalar(name string) string {
	for _, v := range m[name] {
		if v.msg == nil {
			return v.scalar
		}
	}
	return ""
}

func (m protoText) uint(t *testing.T, name string) uint64 {
	t.Helper()
	s := m.scalar(name)
	if s == "" {
		return 0
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("field %s: %v", name, err)
	}
	return n
}

func (m protoText) msgs(name string) []protoText {
	var out []protoText
	for _, v := range m[name] {
		if v.msg != nil {
			out = append(out, v.msg)
		}
	}
	return out
}

// parseProtoText parses what a generated message's String method prints
// (its spacing varies on purpose between builds): `name: value` and
// `name {...}` or `name: {...}`, values bare words or quoted strings.
func parseProtoText(s string) (protoText, error) {
	p := protoParser{s: s}
	m, err := p.fields()
	if err == nil && p.i < len(p.s) {
		err = fmt.Errorf("unexpected %q at %d", p.s[p.i], p.i)
	}
	return m, err
}

type protoParser struct {
	s string
	i int
}

func (p *protoParser) skip() {
	for p.i < len(p.s) && strings.IndexByte(" \t\r\n,;", p.s[p.i]) >= 0 {
		p.i++
	}
}

func (p *protoParser) word() string {
	start := p.i
	for p.i < len(p.s) && strings.IndexByte(" \t\r\n,;:{}<>\"", p.s[p.i]) < 0 {
		p.i++
	}
	return p.s[start:p.i]
}

// fields reads fields up to the end or a closing brace, left unread.
func (p *protoParser) fields() (protoText, error) {
	m := protoText{}
	for {
		p.skip()
		if p.i == len(p.s) || p.s[p.i] == '}' || p.s[p.i] == '>' {
			return m, nil
		}
		name := p.word()
		if name == "" {
			return nil, fmt.Errorf("unexpected %q at %d", p.s[p.i], p.i)
		}
		p.skip()
		if p.i < len(p.s) && p.s[p.i] == ':' {
			p.i++
			p.skip()
		}
		if p.i == len(p.s) {
			return nil, fmt.Errorf("field %s has no value", name)
		}
		switch c := p.s[p.i]; c {
		case '{', '<':
			p.i++
			sub, err := p.fields()
			if err != nil {
				return nil, err
			}
			if p.i == len(p.s) {
				return nil, fmt.Errorf("field %s: unterminated message", name)
			}
			p.i++
			m[name] = append(m[name], protoValue{msg: sub})
		case '"':
			q, err := strconv.QuotedPrefix(p.s[p.i:])
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", name, err)
			}
			p.i += len(q)
			v, _ := strconv.Unquote(q)
			m[name] = append(m[name], protoValue{scalar: v})
		default:
			v := p.word()
			if v == "" {
				return nil, fmt.Errorf("field %s: unexpected %q", name, c)
			}
			m[name] = append(m[name], protoValue{scalar: v})
		}
	}
}

func TestParseProtoText(t *testing.T) {
	for _, s := range []string{
		`overall_code:OVER_LIMIT statuses:{code:OVER_LIMIT current_limit:{requests_per_unit:3 unit:MINUTE} duration_until_reset:{seconds:20}}`,
		`overall_code: OVER_LIMIT  statuses: {code: OVER_LIMIT  current_limit: {requests_per_unit: 3  unit: MINUTE}  duration_until_reset: {seconds: 20}}`,
		"overall_code:OVER_LIMIT\nstatuses {\n code:OVER_LIMIT\n current_limit <requests_per_unit:3 unit:MINUTE name:\"a b\">\n duration_until_reset {seconds:20}\n}\n",
	} {
		m, err := parseProtoText(s)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		r := rlsReplyOf(t, m)
		want := rlsStatus{code: "OVER_LIMIT", limit: &rlsLimit{3, "MINUTE", 0}, reset: 20 * time.Second}
		if r.overall != "OVER_LIMIT" || len(r.statuses) != 1 || r.statuses[0].code != want.code ||
			*r.statuses[0].limit != *want.limit || r.statuses[0].remaining != 0 || r.statuses[0].reset != want.reset {
			t.Errorf("%q: got %+v", s, r)
		}
	}
	for _, s := range []string{`statuses:{code:OK`, `overall_code:`, `{`} {
		if _, err := parseProtoText(s); err == nil {
			t.Errorf("%q: no error", s)
		}
	}
}
