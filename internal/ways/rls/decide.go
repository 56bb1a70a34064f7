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
//  1. Check: every descriptor is checked against its cost without
//     spending anything (Table.Check); a cost of 0 asks whether one token
//     would be served.
//  2. If every descriptor would be served, each one's cost is taken, in
//     the request's order (Table.AllowN), and the request is OK. The
//     table decides each tag atomically, but not several together: a
//     bucket spent by another request between the check and the spend
//     makes its AllowN refuse (and count the refusal). Then the request
//     is OVER_LIMIT, the descriptors before it stay spent, and those
//     after it are neither spent nor counted.
//  3. If any would be refused, none is spent: the request is OVER_LIMIT,
//     and each refused descriptor is counted as a refusal by the table
//     (Table.Refuse), as a refused query on any way in is.
//
// A descriptor that states its limit (stated.go) goes the same way,
// asking Limiter.AllowQuota: with 0 hits to check it, with its cost to
// spend; a refusal in the check is counted by Table.Refuse alike. A limit
// the table refuses (out of range, forbidden by the policy, no room)
// fails the whole request at the check, before anything is spent.
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
	refused, err := s.check(now, r, o.unmatchedOK)
	if err != nil {
		s.bad.Add(1)
		return nil, err
	}
	if refused {
		s.countRefusals(now, r)
	} else {
		refused = s.spend(now, r)
	}
	s.applyCharges(now, r)
	return s.answer(r, refused), nil
}

// check checks every descriptor against its cost and reports whether
// any would be refused. Nothing changes. An error is a descriptor's
// stated limit the table would not decide under: the request is
// answered with it, deciding nothing.
func (s *Server) check(now time.Time, r *request, unmatchedOK bool) (refused bool, err error) {
	for i := range r.items {
		it := &r.items[i]
		if it.charge && !unmatchedOK {
			it.outcome = charged
			continue
		}
		if it.stated && !it.charge {
			var err error
			if it.outcome, it.v, err = s.checkStated(now, r.tag(it), it); err != nil {
				return false, statedError(i, err)
			}
			refused = refused || it.outcome == refuse
			continue
		}
		v := s.table.Check(now, r.tag(it), cost(it))
		switch {
		case v.Policy.Prefix == "" && unmatchedOK:
			it.outcome, it.v = free, bucket.Verdict{Policy: v.Policy}
		case it.charge:
			it.outcome, it.v = charged, bucket.Verdict{Policy: v.Policy}
		case v.Allowed:
			it.outcome, it.v = pass, v
		default:
			it.outcome, it.v = refuse, v
		}
		refused = refused || it.outcome == refuse
	}
	return refused, nil
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
		if it.stated {
			it.v = s.spendStated(now, r.tag(it), it)
		} else {
			it.v = s.table.AllowN(now, r.tag(it), cost(it))
		}
		if !it.v.Allowed {
			it.outcome = refuse
			return true
		}
	}
	return false
}

// countRefusals has the table count each descriptor the check refused as
// a refusal, spending nothing.
func (s *Server) countRefusals(now time.Time, r *request) {
	for i := range r.items {
		if it := &r.items[i]; it.outcome == refuse && it.cost != 0 {
			s.table.Refuse(now, r.tag(it))
		}
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

// cost is the item's cost as the table takes it: a cost past the
// largest int is as never served as any above the burst.
func cost(it *item) int { return int(min(it.cost, math.MaxInt)) }
