// Package client asks a dthrottled whether a request should be served, and
// stays safe when the daemon is slow, hung or gone.
//
// A [Client] holds a small pool of connections (one by default) to one
// daemon, over Unix or TCP. Concurrent calls to [Client.Allow] are
// pipelined onto them: each connection has one writer goroutine, which
// sends every query queued since its last write in one syscall, and one
// reader goroutine, which hands each reply to the oldest waiting query (a
// FIFO per connection, as the protocol answers in request order).
//
// # Deciding in process
//
// On a Unix socket, when the daemon shares its table (its default,
// docs/shared-table.md), the Client maps the table after the first query
// the daemon answers and decides every tag the table holds in its own
// address space: a hash, a probe and a compare-and-swap, no round trip.
// A tag the table does not hold yet is asked over the socket, and the
// daemon inserts it. [Client.Check] says which path decided
// ([Decision.Path]) and, when decided in process, what the bucket holds,
// for the headers ([Decision.SetHeaders]); [Stats] counts the decisions
// made in process and the attaches. When the daemon leaves the table (it
// stopped, or has not beaten in it for a second), queries go back to the
// socket and what follows applies; its next answer attaches again.
// [Config.NoShare] asks every query over the socket.
//
// # Failing safe
//
// Every query is bounded by [Config.Timeout] (5 ms by default), dialing
// included. When the daemon cannot answer in time, or at all, Allow answers
// with the [FailMode]: [FailOpen] (the default, as docs/protocol.md
// advises: serve the request) or [FailClosed], and returns the error beside
// the answer, so a caller may ignore the error and still be safe.
//
// After a failure (a dial error, a timeout, a connection closed or broken,
// a reply that is not OK or NO) the client backs off: for
// [Config.MinBackoff], doubling with each consecutive failure up to
// [Config.MaxBackoff], every query is answered by the fail mode at once,
// with [ErrBackoff], without dialing or writing. When the backoff ends, one
// query probes the daemon (redialing if needed) while the others keep
// failing fast; its answer ends the backoff, its failure doubles it.
// Connections are redialed on demand: there is nothing to restart.
//
// # Keeping replies in step
//
// A query that times out discards its connection: the daemon is not
// answering, and a late reply must never reach the next waiter. Every query
// still waiting on that connection fails at once with the same error (they
// were behind the silent one). A query whose context ends first (the caller
// gave up, which says nothing about the daemon) keeps its place in the
// FIFO: its reply, when it comes, is read and dropped; unless the oldest
// query on that connection has by then waited longer than Timeout, in
// which case the connection is treated as timed out, so that callers with
// short deadlines cannot hide a hung daemon.
//
// # Counters
//
// [Client.Stats] reports answers (OK, NO), timeouts, errors, canceled
// queries, queries answered during a backoff, fail-open and fail-closed
// decisions, dials and reconnects.
//
// # Stating a limit
//
// [Client.AllowLimit] asks under a [Limit] the caller states (so many
// requests per period, as a leaky bucket or fixed windows) in place of
// the tag's policy, for quotas an application keeps itself. It asks the
// daemon's HTTP decision endpoint ([Config.HTTP]), since a line on the
// socket carries a tag and nothing else; it fails safe as Allow does,
// with a backoff of its own, but refuses a request whose limit the
// daemon refuses ([LimitError]).
//
// # HTTP
//
// [Handler] (and [Client.Middleware]) wraps a net/http handler: each
// request's tag comes from a function of the request; a refused request is
// answered 429 Too Many Requests with the headers of [Decision.SetHeaders]
// (Retry-After, and RateLimit-Policy and RateLimit when decided in
// process).
package client
