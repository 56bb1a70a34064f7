package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dthrottle/dthrottle/api"
)

// table returns a tabwriter for aligned columns two spaces apart.
func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

func peers(args []string, e env) int {
	base, _, code, ok := adminFlags("peers", args, 0, e)
	if !ok {
		return code
	}
	var ps []api.Peer
	if err := fetch("GET", base+"/v1/peers", &ps); err != nil {
		return fail(e, err)
	}
	if len(ps) == 0 {
		fmt.Fprintln(e.stdout, "no peers heard (gossip off, or nobody else is reporting)")
		return exitOK
	}
	slices.SortFunc(ps, func(a, b api.Peer) int { return strings.Compare(a.Node, b.Node) })
	var st api.Stats
	if err := fetch("GET", base+"/v1/stats", &st); err != nil {
		return fail(e, err)
	}
	switch g := st.Gossip; {
	case g.PeersMissing > 0:
		fmt.Fprintf(e.stdout, "split: %d missing; this node's share of the rate is %.2f (held by policies under partition \"share\")\n", g.PeersMissing, g.Share)
	case g.Share > 0: // a daemon that says
		fmt.Fprintln(e.stdout, "whole: no peer missing; this node's share of the rate is 1")
	}
	tw := table(e.stdout)
	fmt.Fprintln(tw, "NODE\tADDRESS\tSTATE\tLAST HEARD\tFIRST HEARD\tPACKETS\tHITS\tLOST\tREPAIRED\tDUPLICATES\tPOLICIES\tFOUND\tRELAY\tBEHIND")
	now := e.now()
	for _, p := range ps {
		state := "live"
		switch {
		case p.Left:
			state = "left"
		case p.Missing:
			state = "MISSING"
		case p.Silent:
			state = "SILENT"
		}
		behind := "-"
		if p.BehindSeconds > 0 {
			behind = fmt.Sprintf("%.3fs", p.BehindSeconds)
		}
		policies := "same"
		if !p.FingerprintMatch {
			policies = "DIFFER"
		}
		found, relay := cmp.Or(p.Found, "-"), cmp.Or(p.Relay, "-")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", p.Node, p.Addr, state,
			ago(now, p.LastHeard), ago(now, p.FirstHeard), p.Packets, p.Hits, p.Lost, p.Repaired, p.Duplicates, policies, found, relay, behind)
	}
	tw.Flush()
	return exitOK
}

// ago says how long before now t was, or "never" for the zero time.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return seconds(now.Sub(t).Seconds()) + " ago"
}

func tagInfo(args []string, e env) int {
	base, rest, code, ok := adminFlags("tag", args, 1, e)
	if !ok {
		return code
	}
	var t api.Tag
	if err := fetch("GET", tagURL(base, rest[0]), &t); err != nil {
		return fail(e, err)
	}
	tw := table(e.stdout)
	fmt.Fprintf(tw, "tag\t%s\n", strconv.Quote(t.Tag))
	if t.Key != t.Tag {
		fmt.Fprintf(tw, "key\t%s\n", strconv.Quote(t.Key))
	}
	fmt.Fprintf(tw, "policy\t%s (%s)\n", t.Policy, t.Action)
	if t.DryRun {
		fmt.Fprintf(tw, "dry run\tyes: served whatever the limit says; %d queries of this policy would have been refused\n", t.DryRunRefused)
	}
	if t.Action == "limit" {
		fmt.Fprintf(tw, "limit\t%s per second, burst %s\n", num(t.Rate), num(float64(t.Burst)))
		tracked := "no (its bucket is full)"
		if t.Tracked {
			tracked = "yes"
		}
		fmt.Fprintf(tw, "tracked\t%s\n", tracked)
		fmt.Fprintf(tw, "tokens\t%s of %s\n", num(t.Tokens), num(float64(t.Burst)))
		if t.Debt > 0 {
			fmt.Fprintf(tw, "debt\t%s (refused until repaid)\n", num(t.Debt))
		}
		fmt.Fprintf(tw, "unreported\t%d hits not yet sent to peers\n", t.Unreported)
	}
	tw.Flush()
	return exitOK
}

// num formats a number to at most two decimals, without needless ones:
// 10, 3.5, 0.25, and 0 for a bucket 0.003 tokens into refilling.
func num(f float64) string {
	r := math.Round(f*100) / 100
	if r == 0 {
		r = 0 // not -0
	}
	return strconv.FormatFloat(r, 'f', -1, 64)
}

func stats(args []string, e env) int {
	base, _, code, ok := adminFlags("stats", args, 0, e)
	if !ok {
		return code
	}
	var s api.Stats
	if err := fetch("GET", base+"/v1/stats", &s); err != nil {
		return fail(e, err)
	}
	tw := table(e.stdout)
	fmt.Fprintf(tw, "version\t%s\n", s.Version)
	fmt.Fprintf(tw, "uptime\t%s\n", seconds(s.UptimeSeconds))
	fmt.Fprintf(tw, "tags tracked\t%d\n", s.Tags)
	fmt.Fprintf(tw, "evictions\t%d (%d unreported hits lost with them)\n", s.Evictions, s.EvictedHits)
	c := s.Connections
	fmt.Fprintf(tw, "connections\t%d active, %d accepted, %d rejected over max_conns\n", c.Active, c.Accepted, c.Rejected)
	q := s.Queries
	fmt.Fprintf(tw, "queries\t%d: %d OK, %d NO (%s refused), %d lines too long\n", q.Total, q.OK, q.NO, percent(q.NO, q.OK+q.NO), q.LineTooLong)
	g := s.Gossip
	if !g.Enabled {
		fmt.Fprintf(tw, "gossip\toff\n")
	} else {
		fmt.Fprintf(tw, "gossip\tnode %s, %d peers\n", g.Node, g.Peers)
		fmt.Fprintf(tw, "  sent\t%d datagrams, %d bytes\n", g.PacketsSent, g.BytesSent)
		fmt.Fprintf(tw, "  received\t%d datagrams, %d bytes\n", g.PacketsReceived, g.BytesReceived)
		d := g.Dropped
		fmt.Fprintf(tw, "  dropped\t%d bad MAC, %d malformed, %d other version, %d duplicates, %d stale\n", d.Auth, d.Malformed, d.Version, d.Duplicate, d.Stale)
		fmt.Fprintf(tw, "  lost\t%d datagrams (%d repaired)\n", g.Lost, g.Repair.Repaired)
		r := g.Repair
		fmt.Fprintf(tw, "  repair\t%d datagrams asked for in %d requests; for peers %d resent, %d suppressed, %d gone, %d refused\n",
			r.Asked, r.Requests, r.Resent, r.Suppressed, r.Gone, r.Refused)
		fmt.Fprintf(tw, "  policy mismatch\t%d datagrams\n", g.FingerprintMismatch)
	}
	tw.Flush()
	if len(s.Policies) > 0 {
		fmt.Fprintln(e.stdout)
		tw = table(e.stdout)
		fmt.Fprintln(tw, "POLICY\tOK\tNO\tREFUSED")
		for _, p := range s.Policies {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", p.Name, p.OK, p.NO, percent(p.NO, p.OK+p.NO))
		}
		tw.Flush()
	}
	return exitOK
}

// percent formats part of total as a percentage, "-" when total is 0.
func percent(part, total uint64) string {
	if total == 0 {
		return "-"
	}
	return strconv.FormatFloat(100*float64(part)/float64(total), 'f', 1, 64) + "%"
}
