package transport

import (
	"errors"
	"fmt"
	"net"
)

// Unicaster is a Transport that can also send a datagram to one peer
// only: the one a received Packet came From. Warm start answers a
// snapshot request through it; a transport without it cannot answer.
type Unicaster interface {
	// SendTo sends b to the address to, as a Packet's From gives it. It
	// does not retain b. After Close it returns an error matching
	// net.ErrClosed.
	SendTo(b []byte, to string) error
}

// ErrNoUnicast is returned by a combination of transports' SendTo when
// none of them can send to a single address.
var ErrNoUnicast = errors.New("transport: no unicast transport")

var (
	_ Unicaster = (*MemTransport)(nil)
	_ Unicaster = (*MulticastTransport)(nil)
	_ Unicaster = (*UnicastTransport)(nil)
	_ Unicaster = (*multi)(nil)
)

// SendTo queues a copy of b for the node named to only, with the
// network's faults; a name not on the network receives nothing.
func (t *MemTransport) SendTo(b []byte, to string) error {
	if to == "" {
		return fmt.Errorf("transport: send to an empty name")
	}
	return t.network.send(t, b, to)
}

// SendTo sends b through the first of the combined transports that can
// send to one address.
func (m *multi) SendTo(b []byte, to string) error {
	select {
	case <-m.done:
		return net.ErrClosed
	default:
	}
	err := ErrNoUnicast
	for _, t := range m.ts {
		if u, ok := t.(Unicaster); ok {
			if err = u.SendTo(b, to); !errors.Is(err, ErrNoUnicast) {
				return err
			}
		}
	}
	return err
}
