package h2watch

import (
	"encoding/binary"

	"golang.org/x/net/http2"
)

// This file follows the HTTP/2 frames of a connection's bytes, in either
// direction, for the watchdog (watchdog.go): the gRPC server reads and
// writes whole frames, but the connection's reads and writes split them
// anywhere, so a frameScanner keeps its place across calls. It reads
// only what the watchdog needs: each frame's header, and the values of
// the frames that move a flow-control window or end streams (a SETTINGS
// frame's entries, a WINDOW_UPDATE's increment, a GOAWAY's last stream).
// It trusts nothing: bytes that are not HTTP/2 make frames that mean
// nothing, and the gRPC server, reading the same bytes, closes the
// connection.

// frameHeaderLen is the length of an HTTP/2 frame header.
const frameHeaderLen = 9

// frame is an HTTP/2 frame's header.
type frame struct {
	typ    http2.FrameType
	flags  http2.Flags
	stream uint32
	length int // the payload's length
}

// frameScanner reads the frames of one direction of a connection, fed in
// pieces by scan. The zero frameScanner expects a frame header first. It
// is not safe for concurrent use.
type frameScanner struct {
	skip  int                  // bytes to pass over: a preface, or what is left of a payload
	head  [frameHeaderLen]byte // a frame header being read
	nhead int
	f     frame   // the frame whose values are being read
	units int     // values of f still to read
	size  int     // the length of one value: 6 for a setting, 4 otherwise
	unit  [6]byte // a value being read
	nunit int
	left  int // bytes of f's payload after its values
}

// scan reads p, the next bytes of the connection, and calls on for each
// frame whose header it completes (value nil), then for each value of
// that frame it completes.
func (sc *frameScanner) scan(p []byte, on func(f frame, value []byte)) {
	for len(p) > 0 {
		switch {
		case sc.skip > 0:
			n := min(sc.skip, len(p))
			sc.skip -= n
			p = p[n:]
		case sc.units > 0:
			n := copy(sc.unit[sc.nunit:sc.size], p)
			sc.nunit += n
			p = p[n:]
			if sc.nunit < sc.size {
				return
			}
			sc.nunit = 0
			sc.units--
			on(sc.f, sc.unit[:sc.size])
			if sc.units == 0 {
				sc.skip = sc.left
			}
		default:
			n := copy(sc.head[sc.nhead:], p)
			sc.nhead += n
			p = p[n:]
			if sc.nhead < frameHeaderLen {
				return
			}
			sc.nhead = 0
			f := frame{
				length: int(sc.head[0])<<16 | int(sc.head[1])<<8 | int(sc.head[2]),
				typ:    http2.FrameType(sc.head[3]),
				flags:  http2.Flags(sc.head[4]),
				stream: binary.BigEndian.Uint32(sc.head[5:]) & (1<<31 - 1),
			}
			on(f, nil)
			sc.f, sc.size, sc.units = f, 4, 0
			switch {
			case f.typ == http2.FrameSettings && !f.flags.Has(http2.FlagSettingsAck):
				sc.size, sc.units = 6, f.length/6
			case f.typ == http2.FrameWindowUpdate && f.length >= 4, f.typ == http2.FrameGoAway && f.length >= 8:
				sc.units = 1
			}
			sc.left = f.length - sc.units*sc.size
			if sc.units == 0 {
				sc.skip = f.length
			}
		}
	}
}
