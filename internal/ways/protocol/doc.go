// Package protocol serves the dthrottle line protocol over stream listeners.
//
// A client connects over a stream socket (Unix or TCP) and sends requests,
// each a throttling tag followed by '\n'. Every request gets exactly one
// reply, "OK\n" or "NO\n", in request order. A client may pipeline: send any
// number of requests before reading a reply. The package knows nothing of
// buckets; each answer comes from the [decide.Allower] given to [NewServer]. It
// says only what is spoken on a connection: accepting, the connection
// limit and shutdown are package serve's, of which a [Server] is made.
//
// # Requests
//
// Tags are opaque, case-sensitive bytes (NULs and binary included), except
// that one trailing '\r' is stripped so that `nc -C` and telnet work. An
// empty tag is answered OK without consulting the Allower. A request line
// may hold at most [MaxLine] bytes before its '\n'. A connection that sends
// more without a '\n' gets the replies to its earlier lines and is then
// closed; the event is counted in [Stats].LineTooLong and logged at Warn with
// the remote address and size, never the tag. Other connections carry on.
//
// # Reading and writing
//
// Each connection is served by one goroutine. It reads into a 4 KiB buffer,
// answers every complete line that buffer holds (reading the clock once per
// read, not per request), and writes all those replies with one Write before
// reading again: never one write per reply while input is waiting. The
// buffer grows, up to MaxLine+1 bytes, only while a single line does not fit
// in it, and goes back to 4 KiB once drained. Replies are written early when
// 16 KiB are pending, so a client that sends without reading blocks its own
// connection's Write, which stops that connection's reads: memory per
// connection stays bounded: about 4.5 KB of resident memory idle and 11 KB
// once used, as measured (80 KiB at most while a 64 KiB line arrives).
// In steady state answering a request allocates nothing.
//
// An Allower that is also a [decide.BatchAllower] is handed up to 64
// consecutive requests of a read at a time, which lets a table fetch the
// entries of the next requests from memory while it decides one; the
// replies are the same, in the same order.
//
// # End of input
//
// When the client closes its sending side (end of file), the server answers
// every complete line it holds and also a final line left without a '\n':
// end of input terminates it. Then it writes the replies and closes the
// connection, so `printf 'a\nb\n' | nc -N -U sock` prints two replies and
// exits, and so does `printf 'a\nb' | nc -N -U sock`.
//
// # Connection limit
//
// [Config].MaxConns caps the connections served at once across all
// listeners. A connection over the limit is accepted and closed at once,
// without a reply, rather than left waiting in the listen backlog: a client
// that fails open sees end of file (or a reset, if it had already sent data)
// immediately and falls through instead of waiting for its timeout. Such
// connections are counted in [Stats].Rejected and logged at Warn at most once
// a second.
//
// # Charges
//
// A [ChargeServer] speaks the charge form of the protocol on a socket of
// its own: each request line is "<n> <tag>", n a count of tokens in
// decimal from 0 to 4294967295, one space, then the tag's bytes, opaque as
// on the query socket. The reply is "OK\n" once the [decide.Charger] has taken
// the n tokens, whatever the bucket held, or "BAD\n" for a line of any
// other form, an empty one included: exactly one reply per line, in
// order. A charge with an empty tag is answered OK without consulting the
// Charger. Everything else (the line cap, batching of replies, end of
// input, the connection limit, shutdown) is as on the query socket. The
// charge form cannot share the query socket: a query line is a tag and
// nothing else, so any marker of a charge would take over some tag's
// meaning.
//
// # Shutdown
//
// [Server.Shutdown] closes the listeners, then interrupts every connection's
// pending read; each connection answers the complete lines it had already
// read, writes the replies and closes. [Server.Close] does the same but gives
// a client that does not read its replies only a short grace to take them.
package protocol
