// Package admin serves dthrottled's HTTP admin endpoint: Prometheus
// metrics, a health check, the gossip peers view, counters as JSON, the
// heaviest tags, the state of one tag, which it can also forget, and a
// status page for people.
//
// It reads the daemon through the functions in Sources, which hand it the
// counters in the types of the packages that keep them (bucket, protocol,
// gossip, httpapi, state); it builds the JSON documents of package api
// from those. Metrics are the components' own: it registers the
// collectors Sources gives it and defines none. It never serves request traffic: the HTTP decision endpoint is package
// httpapi, on a listener of its own.
//
// # Endpoints
//
// Every endpoint answers GET and HEAD; /v1/tags/{tag} also DELETE. Any
// other method gets 405 with an Allow header, an unknown path 404. Errors
// are JSON: {"error":"..."}.
//
//   - /: the status page, HTML for a browser, served at exactly "/" (any
//     other unknown path is 404): decisions and refusals per second per
//     policy over the last 15 minutes as charts drawn on the server (inline
//     SVG, one point per 5 s), the policies' counters, the peers and their
//     health, and the 10 most refused tags of each policy in the cluster
//     (Sources.Top). It has no script (its Content-Security-Policy allows
//     none), needs nothing from elsewhere, and reloads itself every 10 s.
//     Tags are shown as text, HTML-escaped, with bytes that are not valid
//     UTF-8 as \xNN and invisible characters as \xNN or \uNNNN. The
//     history behind the charts is sampled from New to Close into a ring of
//     fixed size: each 5 s keeps its 8 busiest policies by name and sums the
//     others, so memory does not grow with the number of policies.
//   - /metrics: Prometheus text format (below).
//   - /healthz: 200 with {"status":"ok","peers":2,"seconds_since_report":0.4};
//     seconds_since_report (since the last gossip report was sent) is
//     omitted when gossip is off or before the first report.
//   - /v1/stats: the counters of Snapshot. queries.ok and queries.no are
//     sums over the policies; queries.total also counts empty tags, which
//     are answered OK without a policy, so ok+no may be less than total.
//     With gossip off, gossip.enabled is false and its other fields are
//     zero.
//   - /v1/peers: the gossip peers table as a JSON array, empty when gossip
//     is off. Node ids are 16 hex digits; times are RFC 3339 in UTC.
//   - /v1/top: the heaviest tags per policy (api.Top), read through
//     Sources.Top. Parameters: by (refused, the default, or served), scope
//     (cluster, the default, or node), policy (one of the daemon's
//     policies; all when absent or empty) and n (tags per policy, 1 to 100,
//     default 20). Any other parameter, a parameter given twice, or a value
//     out of range is answered 400 with the error document naming it.
//     Without Sources.Top it answers 200 with no policies. Tags that are
//     not valid UTF-8 show each invalid byte as \xNN.
//   - GET /v1/tags/{tag}: the tag's bucket: tracked, policy, action, rate,
//     burst, tokens, debt (the tokens below zero, owed to peers' hits) and
//     unreported hits. An untracked tag shows the full bucket of its policy.
//   - DELETE /v1/tags/{tag}: forgets the tag here, with its unreported hits,
//     and says whether it was tracked. Peers are NOT told: the hits this
//     node already reported stay applied on them, and its unreported hits
//     are never sent. To reset a tag across a cluster, delete it on every
//     node.
//
// The tag is the rest of the path, percent-decoded: /v1/tags/a/b and
// /v1/tags/a%2Fb both name the tag "a/b". Clients should escape tags with
// url.PathEscape. Empty and dot segments ("a//b", "a/../b") are taken
// verbatim too, never redirected to a cleaned path (which would name another
// tag), but many clients, curl among them, remove dot segments before
// sending: escape those. A tag or key that is not valid UTF-8 (a tag over
// max_tag_bytes is keyed by a digest that ends in raw bytes) is shown with
// each invalid byte as \xNN.
//
// # Metrics
//
// A Server's own registry (never the global one) serves the Go runtime
// (go_*) and process (process_*) collectors, the collectors of
// Sources.Collectors (each component's families, defined in the metrics.go
// of its package: the table's queries and tags in bucket, the query
// socket's in protocol, the HTTP endpoint's in httpapi, the SPOE agent's
// in spoe, the state file's in state, unicast discovery's in
// internal/gossip/transport, the gossip node's and its parts' in gossip,
// internal/gossip/warm and internal/gossip/relay, the build and the reloads in
// internal/daemon). A way in or gossip that is off exports no series, so
// alerts on peers or loss stay quiet on a standalone node.
//
// # Exposure
//
// The server listens on the configured address only. Tag data and DELETE
// need no credentials, so the address should be a loopback one (the example
// configuration binds 127.0.0.1); any other address, or an empty host, is
// logged as a warning at start ("admin endpoint reachable from other
// hosts"). Reaching it from elsewhere is left to a reverse proxy that
// authenticates.
package admin
