package admin

import (
	"github.com/dthrottle/dthrottle/api"
	"github.com/dthrottle/dthrottle/internal/gossip/relay"
)

// This file owns relaying's part of /v1/stats (its metrics are
// relay.Collector's).

// relayView is st as /v1/stats shows it.
func relayView(st relay.NodeStats) api.Relay {
	v := api.Relay{Mode: st.Mode, Relays: st.Relays, RemoteRelays: st.RemoteRelays,
		ReportsViaRelays: st.ViaRelays, ReportsDirect: st.Direct,
		Sent: map[string]api.Traffic{}, Received: map[string]api.Traffic{},
		OwnPending: st.OwnPending, OwnForgotten: st.OwnForgotten,
		HeldTags: st.Sum.HeldTags, HeldHits: st.Sum.HeldHits, HotTags: st.Sum.HotTags,
		PassedHits: st.Sum.Passed, DroppedHits: st.Sum.Dropped, ForeignHits: st.ForeignHits,
		RemoteSilences: st.RemoteSilences, CrossingsLost: st.CrossingsLost}
	for _, t := range st.Traffic() {
		m := v.Sent
		if t.Dir == "received" {
			m = v.Received
		}
		m[t.Kind] = api.Traffic{Packets: t.Packets, Bytes: t.Bytes}
	}
	return v
}
