package wire

import "time"

// This file owns the wire format of relaying (package gossip's relay.go):
// three message types whose body is the hits map of type 1, byte for byte
// (wire.go).
//
//	type  name              sent by      to                       empty body
//	6     hits for a relay  any node     one relay of its segment never sent
//	7     aggregate         a relay      every node of its segment  heartbeat
//	8     crossing          a relay      the relays of the other    heartbeat
//	                                     segments
//
// Type 6 carries the hits a node served in one interval of the tags the
// relay sums (gossip.PickRelay); type 7 the sums the relay passes on, which
// include the receiver's own hits; type 8 what a relay passes on of its
// own segment's hits, for the relays of other segments to pass into
// theirs. An empty aggregate or crossing, body 0x80, tells its receivers
// the relay is there.
//
// Types 6 and 8 go to one address, not to the segment: each stream (a
// node's hits to one relay, a relay's crossings) numbers its own
// sequence, and receivers keep a replay window per sender for each of the
// two apart from the window of the datagrams sent to the whole segment.
//
// Receivers that do not know these types ignore them (wire.go), which is
// why relays are turned on only once every node of a segment runs a
// version that knows them.

// The relay message types.
const (
	MsgToRelay   MsgType = 6 // a node's hits, for a relay to sum
	MsgAggregate MsgType = 7 // a relay's sums, for every node of its segment
	MsgCrossing  MsgType = 8 // a relay's sums, for the relays of other segments
)

// EncodeRelay emits hits as datagrams of type t, one of MsgToRelay,
// MsgAggregate and MsgCrossing, under the rules of Encode. With no hit to
// send it emits one empty datagram of type t: a heartbeat of its stream,
// which lets the receiver see a loss at once, and ask for it again,
// rather than at the stream's next hits. (A node sends its hits for a
// relay in an interval that has some, and in the next one.)
func (e *Encoder) EncodeRelay(now time.Time, t MsgType, hits []Hit, emit func(pkt []byte) error) (skipped int, err error) {
	return e.encode(now, t, t, hits, emit)
}
