package transport

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Packet is one datagram received. Its zero value is an empty datagram
// from nowhere.
type Packet struct {
	// Data is the datagram's payload. It belongs to the receiver: the
	// transport never reuses or modifies it.
	Data []byte
	// From is the source address, "ip:port" on a UDP transport and the
	// sending node's name on a MemNetwork.
	From string
	// At is the arrival time: time.Now() on UDP, the due time on a
	// MemNetwork.
	At time.Time
	// Unicast is set when the datagram arrived on a unicast transport's
	// socket: only then is its source a peer one can learn (see
	// UnicastTransport.Heard).
	Unicast bool
}

// Transport moves datagrams between peers. Implementations are safe for
// concurrent use.
type Transport interface {
	// Send sends b to every peer: the multicast group, each unicast peer,
	// or every other node of a MemNetwork. It does not retain b. After
	// Close it returns an error matching net.ErrClosed.
	Send(b []byte) error
	// Packets returns the channel of received datagrams. It is the same
	// channel on every call and is closed once the transport is closed.
	Packets() <-chan Packet
	// Close stops the transport and closes its Packets channel. Calling it
	// again does nothing and returns nil.
	Close() error
}

var (
	_ Transport = (*MemTransport)(nil)
	_ Transport = (*MulticastTransport)(nil)
	_ Transport = (*UnicastTransport)(nil)
	_ Transport = (*multi)(nil)
)

// Multi combines transports, for example multicast and unicast peers at
// once: Send goes to every one of them, Packets merges what they receive,
// and Close closes them all. The result is safe for concurrent use. With a
// single transport Multi returns it unchanged.
func Multi(ts ...Transport) Transport {
	if len(ts) == 1 {
		return ts[0]
	}
	m := &multi{
		ts:       append([]Transport(nil), ts...),
		out:      make(chan Packet, 256),
		done:     make(chan struct{}),
		finished: make(chan struct{}),
	}
	m.wg.Add(len(m.ts))
	for _, t := range m.ts {
		go m.forward(t.Packets())
	}
	go func() {
		m.wg.Wait()
		close(m.out)
		close(m.finished)
	}()
	return m
}

// multi is the Transport returned by Multi.
type multi struct {
	ts       []Transport
	out      chan Packet
	done     chan struct{}  // closed by Close: forwarders stop waiting on out
	finished chan struct{}  // closed after out, once every forwarder is gone
	wg       sync.WaitGroup // forwarders
	once     sync.Once
}

// forward copies in to the merged channel until in is closed or the
// combination is closed.
func (m *multi) forward(in <-chan Packet) {
	defer m.wg.Done()
	for {
		select {
		case p, ok := <-in:
			if !ok {
				return
			}
			select {
			case m.out <- p:
			case <-m.done:
				return
			}
		case <-m.done:
			return
		}
	}
}

func (m *multi) Send(b []byte) error {
	select {
	case <-m.done:
		return net.ErrClosed
	default:
	}
	var errs []error
	for _, t := range m.ts {
		if err := t.Send(b); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (m *multi) Packets() <-chan Packet { return m.out }

func (m *multi) Close() error {
	var errs []error
	m.once.Do(func() {
		close(m.done)
		for _, t := range m.ts {
			if err := t.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		<-m.finished
	})
	return errors.Join(errs...)
}
