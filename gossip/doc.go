// Package gossip shares the hits each node served with its peers, so every
// node's buckets reflect a tag's global count.
//
// Every interval a Node drains its unreported hits and sends them as
// self-contained datagrams (their format is package wire's) over a
// transport (package transport's: UDP multicast, unicast peers, both, or
// an in-memory network for tests). Received reports are checked (MAC, own id, duplicates, gaps)
// and handed to a callback that subtracts them. The package knows nothing
// of the table or of the clients that query it.
package gossip
