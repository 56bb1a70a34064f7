// Package transport owns how datagrams travel between peers: the
// Transport interface (Send, Packets, Close) and the Packet it delivers;
// Unicaster, for an answer to one peer only; Multi, which combines
// transports; the UDP transports, to a multicast group
// (ListenMulticast) and to unicast peers (ListenUnicast), which looks
// peer names up again and learns the peers it is told of or hears from;
// and MemNetwork, an in-memory network with loss, duplication, delay,
// jitter and partitions, on which tests run whole clusters on a fake
// clock.
//
// It knows nothing of what the datagrams say: package internal/gossip/wire writes
// and reads them, and package gossip, the node, decides what to send and
// tells a UnicastTransport, through gossip's Discovery interface, which
// peers to learn. It does not import either.
package transport
