// Package gossip shares the hits each node served with its peers, so every
// node's buckets reflect a tag's global count.
//
// Every interval a Node drains its unreported hits and sends them as
// self-contained datagrams (their format is package wire's) over a
// transport (package transport's: UDP multicast, unicast peers, both, or
// an in-memory network for tests). Received reports are checked (MAC, own
// id, duplicates and gaps, with package peer's windows) and handed to a
// callback that subtracts them. A node has two parts it drives through
// small interfaces (parts.go): warm start (package warm) and relaying
// (package relay). The package knows nothing of the table or of the
// clients that query it.
package gossip
