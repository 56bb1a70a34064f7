package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// The JSON documents served, field for field. Exported types above carry
// the data; these carry the wire names, so that the two can change apart.

type healthJSON struct {
	Status string `json:"status"`
	Peers  int    `json:"peers"`
	// SecondsSinceReport is omitted when gossip is off or before the first report.
	SecondsSinceReport *float64 `json:"seconds_since_report,omitempty"`
}

type peerJSON struct {
	Node             string `json:"node"`
	Addr             string `json:"addr"`
	FirstHeard       string `json:"first_heard"`
	LastHeard        string `json:"last_heard"`
	Packets          uint64 `json:"packets"`
	Hits             uint64 `json:"hits"`
	Lost             uint64 `json:"lost"`
	Duplicates       uint64 `json:"duplicates"`
	FingerprintMatch bool   `json:"fingerprint_match"`
	Silent           bool   `json:"silent"`
}

type tagJSON struct {
	Tag        string  `json:"tag"`
	Key        string  `json:"key"`
	Tracked    bool    `json:"tracked"`
	Policy     string  `json:"policy"`
	Action     string  `json:"action"`
	Rate       float64 `json:"rate"`
	Burst      int     `json:"burst"`
	Tokens     float64 `json:"tokens"`
	Debt       float64 `json:"debt"`
	Unreported uint64  `json:"unreported"`
}

type forgetJSON struct {
	Tag       string `json:"tag"`
	Forgotten bool   `json:"forgotten"`
}

type statsJSON struct {
	Version       string  `json:"version"`
	UptimeSeconds float64 `json:"uptime_seconds"`
	Tags          int     `json:"tags"`
	Evictions     uint64  `json:"evictions"`
	EvictedHits   uint64  `json:"evicted_hits"`
	Connections   struct {
		Active   uint64 `json:"active"`
		Accepted uint64 `json:"accepted"`
		Rejected uint64 `json:"rejected"`
	} `json:"connections"`
	Queries struct {
		Total       uint64 `json:"total"`
		OK          uint64 `json:"ok"`
		NO          uint64 `json:"no"`
		LineTooLong uint64 `json:"line_too_long"`
	} `json:"queries"`
	Policies []policyJSON `json:"policies"`
	Gossip   gossipJSON   `json:"gossip"`
}

type policyJSON struct {
	Name   string `json:"name"`
	Action string `json:"action"`
	OK     uint64 `json:"ok"`
	NO     uint64 `json:"no"`
}

type gossipJSON struct {
	Enabled         bool   `json:"enabled"`
	Node            string `json:"node"`
	PacketsSent     uint64 `json:"packets_sent"`
	BytesSent       uint64 `json:"bytes_sent"`
	PacketsReceived uint64 `json:"packets_received"`
	BytesReceived   uint64 `json:"bytes_received"`
	Dropped         struct {
		Auth      uint64 `json:"auth"`
		Malformed uint64 `json:"malformed"`
		Version   uint64 `json:"version"`
		Duplicate uint64 `json:"duplicate"`
		Stale     uint64 `json:"stale"`
	} `json:"dropped"`
	Lost                uint64 `json:"lost"`
	FingerprintMismatch uint64 `json:"fingerprint_mismatch"`
	Peers               int    `json:"peers"`
}

type errorJSON struct {
	Error string `json:"error"`
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	snap := s.src.Snapshot()
	h := healthJSON{Status: "ok"}
	if g := snap.Gossip; g.Enabled {
		h.Peers = g.Peers
		if !g.LastReport.IsZero() {
			since := max(0, s.now().Sub(g.LastReport).Seconds())
			h.SecondsSinceReport = &since
		}
	}
	writeJSON(w, http.StatusOK, h)
}

func (s *Server) peers(w http.ResponseWriter, r *http.Request) {
	var peers []Peer
	if s.src.Peers != nil {
		peers = s.src.Peers()
	}
	out := make([]peerJSON, len(peers))
	for i, p := range peers {
		out[i] = peerJSON{
			Node:             nodeHex(p.Node),
			Addr:             p.Addr,
			FirstHeard:       timestamp(p.FirstHeard),
			LastHeard:        timestamp(p.LastHeard),
			Packets:          p.Packets,
			Hits:             p.Hits,
			Lost:             p.Lost,
			Duplicates:       p.Duplicates,
			FingerprintMatch: p.FingerprintMatch,
			Silent:           p.Silent,
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	snap := s.src.Snapshot()
	var out statsJSON
	out.Version = snap.Version
	if !snap.Started.IsZero() {
		out.UptimeSeconds = max(0, s.now().Sub(snap.Started).Seconds())
	}
	out.Tags = snap.Tags
	out.Evictions = snap.Evictions
	out.EvictedHits = snap.EvictedHits
	out.Connections.Active = snap.Connections.Active
	out.Connections.Accepted = snap.Connections.Accepted
	out.Connections.Rejected = snap.Connections.Rejected
	out.Queries.Total = snap.Queries.Total
	out.Queries.LineTooLong = snap.Queries.LineTooLong
	out.Policies = make([]policyJSON, len(snap.Policies))
	for i, p := range snap.Policies {
		out.Policies[i] = policyJSON{Name: p.Name, Action: p.Action, OK: p.OK, NO: p.NO}
		out.Queries.OK += p.OK
		out.Queries.NO += p.NO
	}
	if g := snap.Gossip; g.Enabled {
		out.Gossip = gossipJSON{
			Enabled:             true,
			Node:                nodeHex(g.Node),
			PacketsSent:         g.PacketsSent,
			BytesSent:           g.BytesSent,
			PacketsReceived:     g.PacketsReceived,
			BytesReceived:       g.BytesReceived,
			Lost:                g.Lost,
			FingerprintMismatch: g.FingerprintMismatch,
			Peers:               g.Peers,
		}
		out.Gossip.Dropped.Auth = g.Dropped.Auth
		out.Gossip.Dropped.Malformed = g.Dropped.Malformed
		out.Gossip.Dropped.Version = g.Dropped.Version
		out.Gossip.Dropped.Duplicate = g.Dropped.Duplicate
		out.Gossip.Dropped.Stale = g.Dropped.Stale
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getTag(w http.ResponseWriter, r *http.Request) {
	tag, ok := pathTag(w, r)
	if !ok {
		return
	}
	v := s.src.Tag(tag)
	writeJSON(w, http.StatusOK, tagJSON{
		Tag:        printable(tag),
		Key:        printable(v.Key),
		Tracked:    v.Tracked,
		Policy:     v.Policy,
		Action:     v.Action,
		Rate:       v.Rate,
		Burst:      v.Burst,
		Tokens:     v.Tokens,
		Debt:       max(0, -v.Tokens),
		Unreported: v.Unreported,
	})
}

func (s *Server) deleteTag(w http.ResponseWriter, r *http.Request) {
	tag, ok := pathTag(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, forgetJSON{Tag: printable(tag), Forgotten: s.src.Forget(tag)})
}

// pathTag returns the request's tag, or answers 400 for an empty one (an
// empty tag is answered OK without a policy and never tracked).
func pathTag(w http.ResponseWriter, r *http.Request) (string, bool) {
	tag := r.PathValue("tag")
	if tag == "" {
		writeError(w, http.StatusBadRequest, "empty tag: want /v1/tags/{tag}")
		return "", false
	}
	return tag, true
}

// nodeHex formats a node id as gossip's logs do.
func nodeHex(id uint64) string { return fmt.Sprintf("%016x", id) }

// timestamp formats t as RFC 3339 in UTC, with as many fractional digits as
// it needs.
func timestamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// printable returns s with each byte that is not part of valid UTF-8
// written as \xNN, since a JSON string can only hold text. Tags are opaque
// bytes, and a long tag's digest key ends in raw bytes.
func printable(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && n == 1 {
			fmt.Fprintf(&b, `\x%02x`, s[0])
		} else {
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}

// writeJSON answers status with v as JSON. The documents here are plain
// structs of numbers and strings, which always marshal.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body, _ = json.Marshal(errorJSON{Error: "encoding response: " + err.Error()})
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

// writeError answers status with {"error": msg}.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorJSON{Error: msg})
}
