package admin

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/dthrottle/dthrottle/api"
	"github.com/dthrottle/dthrottle/internal/gossip"
)

// The JSON documents are the types of package api, which carry the wire
// names; the exported types of this package carry the data.

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	snap := s.src.Snapshot()
	h := api.Health{Status: "ok"}
	if g := snap.Gossip; g != nil {
		h.Peers = g.Peers
		if !g.LastReport.IsZero() {
			since := max(0, s.now().Sub(g.LastReport).Seconds())
			h.SecondsSinceReport = &since
		}
	}
	writeJSON(w, http.StatusOK, h)
}

func (s *Server) peers(w http.ResponseWriter, r *http.Request) {
	var peers []gossip.PeerInfo
	if s.src.Peers != nil {
		peers = s.src.Peers()
	}
	out := make([]api.Peer, len(peers))
	for i, p := range peers {
		out[i] = api.Peer{
			Node:             nodeHex(p.Node),
			Addr:             p.Addr,
			FirstHeard:       p.FirstHeard.UTC(),
			LastHeard:        p.LastHeard.UTC(),
			Packets:          p.Packets,
			Hits:             p.Hits,
			Lost:             p.Lost,
			Repaired:         p.Repaired,
			Duplicates:       p.Duplicates,
			FingerprintMatch: p.FingerprintMatch,
			Silent:           p.Silent,
			Found:            p.Found,
			Relay:            p.Relay,
			Relayed:          p.Relayed,
			Missing:          p.Missing,
			Left:             p.Left,
			DelaySeconds:     p.Delay.Seconds(),
			BehindSeconds:    p.Behind.Seconds(),
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	snap := s.src.Snapshot()
	var out api.Stats
	out.Version = snap.Version
	if !snap.Started.IsZero() {
		out.UptimeSeconds = max(0, s.now().Sub(snap.Started).Seconds())
	}
	out.Tags = snap.Table.Tags
	out.Evictions = snap.Table.Evictions
	out.EvictedHits = snap.Table.EvictedHits
	out.Connections = api.Connections{Active: snap.Server.Active, Accepted: snap.Server.Accepted,
		Rejected: snap.Server.Rejected}
	out.Queries.Total = snap.Server.Queries
	out.Queries.LineTooLong = snap.Server.LineTooLong
	out.Policies = make([]api.Policy, len(snap.Policies))
	for i, p := range snap.Policies {
		out.Policies[i] = api.Policy{Name: p.Name, Action: p.Action.String(), OK: p.OK, NO: p.NO, DryRun: p.DryRun, DryRunRefused: p.DryRunRefused}
		out.Queries.OK += p.OK
		out.Queries.NO += p.NO
	}
	out.Gossip.Share = 1 // a node alone holds the whole rate
	if g := snap.Gossip; g != nil {
		out.Gossip = api.Gossip{
			Enabled:         true,
			Node:            nodeHex(g.Node),
			PacketsSent:     g.PacketsSent,
			BytesSent:       g.BytesSent,
			PacketsReceived: g.PacketsReceived,
			BytesReceived:   g.BytesReceived,
			Lost:            g.Lost,
			Repair: api.Repair{Requests: g.Repair.Requests, Asked: g.Repair.Asked, Repaired: g.Repair.Repaired,
				Resent: g.Repair.Resent, Suppressed: g.Repair.Suppressed, Gone: g.Repair.Gone, Refused: g.Repair.Refused},
			FingerprintMismatch: g.FingerprintMismatch,
			Peers:               g.Peers,
			PeersMissing:        len(g.Members.Missing),
			Share:               cmp.Or(g.Members.Share, 1),
		}
		out.Gossip.Dropped = api.Dropped{Auth: g.DroppedAuth, Malformed: g.DroppedMalformed,
			Version: g.DroppedVersion, Duplicate: g.DroppedDuplicate, Stale: g.DroppedStale}
		out.Gossip.Learned, out.Gossip.LearnedTotal = g.Discovery.Learned, g.Discovery.Added
		out.Gossip.Forgotten, out.Gossip.Refused = g.Discovery.Forgotten, g.Discovery.Refused
		w := g.Warm
		out.Gossip.Warm = api.Warm{Warming: w.Warming, Warm: w.Warm, Seconds: w.WarmDuration.Seconds(),
			RequestsSent: w.RequestsSent, RequestsReceived: w.RequestsReceived, RequestsRefused: w.RequestsRefused,
			AnswersSent: w.AnswersSent, AnswerBytesSent: w.AnswerBytesSent, TagsSent: w.TagsSent,
			AnswersReceived: w.AnswersReceived, AnswerBytesReceived: w.AnswerBytesRecv, TagsReceived: w.TagsReceived,
			TagsAdopted: w.TagsAdopted, PeersAnswered: w.PeersAnswered,
			DroppedUnasked: w.DroppedUnasked, DroppedDuplicate: w.DroppedDuplicate}
		rv := relayView(g.Relay)
		out.Gossip.Relay = &rv
	}
	if st := snap.State; st != nil {
		out.State = &api.State{Loaded: st.Loaded, Ignored: st.Ignored, Saved: st.Saved, SaveFailure: st.SaveFailure,
			LoadTags: st.Load.Tags, LoadAdopted: st.Load.Adopted, LoadBytes: st.Load.Bytes,
			LoadSeconds: st.Load.Duration.Seconds(), LoadAgeSeconds: st.Load.Age.Seconds(),
			SaveTags: st.Save.Tags, SaveBytes: st.Save.Bytes, SaveSeconds: st.Save.Duration.Seconds()}
	}
	if h := snap.HTTP; h != nil {
		out.HTTP = &api.HTTP{Allowed: h.Allowed, Refused: h.Refused, Bad: h.Bad, Active: h.Active,
			Accepted: h.Accepted, Rejected: h.Rejected}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getTag(w http.ResponseWriter, r *http.Request) {
	tag, ok := pathTag(w, r)
	if !ok {
		return
	}
	v := s.src.Tag(tag)
	writeJSON(w, http.StatusOK, api.Tag{
		Tag:        printableText(tag),
		Key:        printableText(v.Key),
		Tracked:    v.Tracked,
		Policy:     v.Policy,
		Action:     v.Action,
		Rate:       v.Rate,
		Burst:      v.Burst,
		Tokens:     v.Tokens,
		Debt:       max(0, -v.Tokens),
		Unreported: v.Unreported,

		DryRun:        v.DryRun,
		DryRunRefused: v.DryRunRefused,
	})
}

func (s *Server) deleteTag(w http.ResponseWriter, r *http.Request) {
	tag, ok := pathTag(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, api.Forget{Tag: printableText(tag), Forgotten: s.src.Forget(tag)})
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

// writeJSON answers status with v as JSON. The documents here are plain
// structs of numbers and strings, which always marshal.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	body = jsonSafe(body)
	if err != nil {
		status = http.StatusInternalServerError
		body, _ = json.Marshal(api.Error{Error: "encoding response: " + err.Error()})
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
	writeJSON(w, status, api.Error{Error: msg})
}
