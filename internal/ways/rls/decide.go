package rls

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// How a request's descriptors are decided (docs/integrations/envoy.md,
// "Several descriptors"):
//
//  1. Check: every descriptor's bucket is read without changing it
//     (Table.Peek) and compared with its cost; a cost of 0 asks whether
//     one token would be served.
//  2. If every descriptor would be served, each one's cost is taken, in
//     the request's order (Table.AllowN), and the request is OK. The
//     table decides each tag atomically, but not several together: a
//     bucket spent by another request between the check and the spend
//     (or a level within a nanosecond of the cost) makes its AllowN
//     refuse. Then the request is OVER_LIMIT, the descriptors before it
//     stay spent, and those after it are neither spent nor counted.
//  3. If any would be refused, none is spent: the request is OVER_LIMIT,
//     and each refused descriptor is counted as a refusal by the table
//     (asked for a cost above any burst, which it refuses without
//     changing the bucket), as a refused query on any way in is.
//
// Charges are applied whatever the other descriptors decide.

// outcome is what the check made of a descriptor.
type outcome uint8

const (
	free    outcome = iota // OK with no limit: no prefix policy matches it and unmatched is "ok"
	pass                   // would be served
	refuse                 // would be refused, or was
	charged                // a charge
)

// neverServed is a cost above every policy's burst: the table refuses it
// without changing the bucket, and counts the refusal.
const neverServed = bucket.MaxBurst + 1

// service is the RateLimitService the gRPC server serves: the Server's
// decisions. A method the service gains in a later version of its
// definition is answered UNIMPLEMENTED.
type service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	*Server
}

var requests = sync.Pool{New: func() any { return new(request) }}

// maxPooled is the largest buffer a request returns to the pool.
const maxPooled = 16 << 10

// ShouldRateLimit decides req: every descriptor, or none, is spent.
func (s service) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	o := s.opts.Load()
	r := requests.Get().(*request)
	defer func() {
		if cap(r.buf)+cap(r.policies)+cap(r.limits) <= maxPooled {
			requests.Put(r)
		}
	}()
	if err := r.read(req, o.chargeKey); err != nil {
		s.bad.Add(1)
		var br badRequest
		if errors.As(err, &br) {
			return nil, status.Error(codes.InvalidArgument, "rls: "+err.Error())
		}
		return nil, err
	}
	now := s.now()
	refused := s.check(now, r, o.unmatchedOK)
	if refused {
		s.countRefusals(now, r)
	} else {
		refused = s.spend(now, r)
	}
	s.applyCharges(now, r)
	return s.answer(r, refused), nil
}

// check reads every descriptor's bucket and reports whether any would
// be refused. Nothing changes.
func (s *Server) check(now time.Time, r *request, unmatchedOK bool) (refused bool) {
	for i := range r.items {
		it := &r.items[i]
		if it.charge && !unmatchedOK {
			it.outcome = charged
			continue
		}
		st, _ := s.table.Peek(now, s.table.Key(r.tag(it))) // an unknown tag's State is a full bucket's
		p := st.Policy
		it.v = bucket.Verdict{Policy: p}
		switch {
		case p.Prefix == "" && unmatchedOK:
			it.outcome = free
		case it.charge:
			it.outcome = charged
		case p.Action == bucket.Allow:
			it.outcome, it.v.Allowed = pass, true
		case p.Action == bucket.Deny && !p.DryRun:
			it.outcome = refuse
		case p.Action == bucket.Deny:
			it.outcome, it.v.Allowed, it.v.WouldRefuse = pass, true, true
		default:
			it.v = level(p, st.Tokens, it.cost)
			it.outcome = pass
			if !it.v.Allowed {
				if p.DryRun {
					it.v.Allowed, it.v.WouldRefuse = true, true
				} else {
					it.outcome = refuse
				}
			}
		}
		refused = refused || it.outcome == refuse
	}
	return refused
}

// spend takes every descriptor's cost, in order, and reports whether the
// table refused one (its bucket was spent since the check): then it stops
// there.
func (s *Server) spend(now time.Time, r *request) (refused bool) {
	for i := range r.items {
		it := &r.items[i]
		if it.outcome != pass || it.cost == 0 {
			continue
		}
		v := s.table.AllowN(now, r.tag(it), int(min(it.cost, neverServed)))
		it.v = v
		if !v.Allowed {
			it.outcome = refuse
			return true
		}
	}
	return false
}

// countRefusals has the table count each descriptor that would be
// refused as a refusal, without spending anything, and takes the level
// it reads.
func (s *Server) countRefusals(now time.Time, r *request) {
	for i := range r.items {
		it := &r.items[i]
		if it.outcome != refuse || it.cost == 0 {
			continue
		}
		v := s.table.AllowN(now, r.tag(it), neverServed)
		if v.Policy.Action == bucket.Limit {
			v = level(v.Policy, v.Tokens, it.cost)
		}
		v.Allowed, v.WouldRefuse = false, false
		it.v = v
	}
}

// applyCharges charges every charge descriptor its cost.
func (s *Server) applyCharges(now time.Time, r *request) {
	for i := range r.items {
		if it := &r.items[i]; it.outcome == charged {
			s.table.Charge(now, r.tag(it), uint32(min(it.cost, math.MaxUint32)))
		}
	}
}

// level is the verdict a bucket of policy p holding tokens gives a query
// of cost tokens (a cost of 0 asks for one) without spending it: served
// while it holds them, never above the burst.
func level(p bucket.Policy, tokens float64, cost uint64) bucket.Verdict {
	v := bucket.Verdict{Policy: p, Tokens: tokens}
	burst := float64(p.Burst)
	if tokens < burst {
		v.Full = seconds((burst - tokens) / p.Rate)
	}
	need := float64(max(cost, 1))
	switch {
	case need > burst:
		v.Wait = math.MaxInt64
	case tokens < need:
		v.Wait = seconds((need - tokens) / p.Rate)
	default:
		v.Allowed = true
	}
	return v
}

// seconds is s seconds as a Duration, saturating.
func seconds(s float64) time.Duration {
	if ns := s * float64(time.Second); ns < math.MaxInt64 {
		return time.Duration(math.Ceil(ns))
	}
	return math.MaxInt64
}
