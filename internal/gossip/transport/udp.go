package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	udpReadBuffer   = 65536            // larger than any UDP datagram
	udpChanBuffer   = 256              // received datagrams waiting for the reader of Packets
	resolveDefault  = 30 * time.Second // UnicastConfig.Resolve when zero
	resolveTimeout  = 5 * time.Second  // longest wait for one name lookup
	readBackoffMin  = 5 * time.Millisecond
	readBackoffMax  = time.Second
	maxMulticastTTL = 255
)

// MulticastConfig configures ListenMulticast. Only IPv4 groups are
// supported. The zero value is not valid: Group is required.
type MulticastConfig struct {
	// Group is the IPv4 multicast group and port, e.g.
	// "239.255.77.77:7777".
	Group string
	// Interface names the interface to join the group on and send from,
	// e.g. "eth0". "" lets the kernel choose from its routing table (the
	// route to 224.0.0.0/4, else the default route); with neither, as in
	// a network namespace with only lo, joining fails with "no such
	// device": name the interface ("lo") or add the route.
	Interface string
	// TTL is the hop limit of datagrams sent, 0 to 255: 0 keeps them on
	// this host, 1 on the local network.
	TTL int
	// Logger receives read errors; nil discards them.
	Logger *slog.Logger
}

// UnicastConfig configures ListenUnicast. The zero value listens on a free
// port of every interface and sends to nobody.
type UnicastConfig struct {
	// Bind is the local "host:port" where datagrams arrive, e.g. ":7777";
	// port 0 picks a free one (see UDPTransport.LocalAddr).
	Bind string
	// Peers are the "host:port" destinations of Send. A host may be a
	// name: it is looked up at start and again every Resolve, and the
	// previous address is kept while a lookup fails.
	Peers []string
	// Resolve is how often peer names are looked up again; zero means 30s.
	Resolve time.Duration
	// Logger receives resolution and read errors; nil discards them.
	Logger *slog.Logger
}

// multicastAllOff turns IP_MULTICAST_ALL off. By default Linux hands a
// socket the datagrams of every group that any socket on the host joined
// on its port, so two groups on one port would mix, and a socket bound to
// the wildcard address would also get the group's traffic.
var multicastAllOff = sockopt{unix.IPPROTO_IP, unix.IP_MULTICAST_ALL, 0, "IP_MULTICAST_ALL"}

// unicastControl is the net.ListenConfig.Control of a unicast socket: only
// IP_MULTICAST_ALL off, so it never receives a group's datagrams. It
// shares its port with no other socket.
func unicastControl(network, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = setSockopts(int(fd), network, []sockopt{multicastAllOff})
	})
	if err != nil {
		return err
	}
	return serr
}

// setSockopts sets integer socket options on fd in order.
func setSockopts(fd int, network string, opts []sockopt) error {
	for _, o := range opts {
		if err := unix.SetsockoptInt(fd, o.level, o.name, o.value); err != nil {
			return fmt.Errorf("transport: setting %s on %s socket: %w", o.what, network, os.NewSyscallError("setsockopt", err))
		}
	}
	return nil
}

// sockopt is one integer socket option.
type sockopt struct {
	level, name, value int
	what               string
}

// udpSockets is what both UDP transports share: their sockets, each read
// by a goroutine of its own into one Packets channel, and a close that
// stops them all. Safe for concurrent use once started.
type udpSockets struct {
	conns []*net.UDPConn // the first is the one LocalAddr reports
	log   *slog.Logger
	ch    chan Packet

	unicast bool // mark received Packets as Unicast

	ctx    context.Context // canceled by Close; bounds lookups
	cancel context.CancelFunc
	wg     sync.WaitGroup // reader and resolver goroutines
	once   sync.Once
}

func newUDPSockets(log *slog.Logger, conns ...*net.UDPConn) udpSockets {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return udpSockets{conns: conns, log: log, ch: make(chan Packet, udpChanBuffer), ctx: ctx, cancel: cancel}
}

// start runs a receive loop per socket.
func (u *udpSockets) start() {
	for _, c := range u.conns {
		u.wg.Add(1)
		go u.receive(c)
	}
}

// receive reads datagrams from conn into Packets until Close.
func (u *udpSockets) receive(conn *net.UDPConn) {
	defer u.wg.Done()
	buf := make([]byte, udpReadBuffer)
	var backoff time.Duration
	for {
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if u.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Not expected on a UDP socket; back off so a persistent
			// error neither spins nor floods the log.
			backoff = min(max(2*backoff, readBackoffMin), readBackoffMax)
			u.log.Warn("reading datagram failed, retrying", "err", err, "retry_in", backoff)
			select {
			case <-u.ctx.Done():
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		data := make([]byte, n) // exactly n: the receiver may keep it
		copy(data, buf)
		p := Packet{
			Data:    data,
			From:    netip.AddrPortFrom(from.Addr().Unmap(), from.Port()).String(),
			At:      time.Now(),
			Unicast: u.unicast,
		}
		select {
		case u.ch <- p:
		case <-u.ctx.Done():
			return
		}
	}
}

// closed returns an error matching net.ErrClosed once Close was called.
func (u *udpSockets) closed() error {
	if u.ctx.Err() != nil {
		return fmt.Errorf("transport: send: %w", net.ErrClosed)
	}
	return nil
}

// sendTo writes b to to, an "ip:port" such as a Packet's From, through
// conn.
func (u *udpSockets) sendTo(conn *net.UDPConn, b []byte, to string) error {
	if err := u.closed(); err != nil {
		return err
	}
	ap, err := netip.ParseAddrPort(to)
	if err != nil {
		return fmt.Errorf("transport: send to %q: %w", to, err)
	}
	_, err = conn.WriteToUDPAddrPort(b, ap)
	return err
}

// Packets returns the received datagrams, in arrival order. Nothing is
// read faster than it is drained: when the channel is full, the sockets'
// own buffers fill and the kernel drops datagrams. It is closed by Close.
func (u *udpSockets) Packets() <-chan Packet { return u.ch }

// LocalAddr returns the address the receiving socket is bound to, such as
// the port chosen for a Bind with port 0, or the multicast group.
func (u *udpSockets) LocalAddr() net.Addr { return u.conns[0].LocalAddr() }

// Close closes the sockets, stops the background goroutines and then
// closes Packets. Calling it again does nothing and returns nil.
func (u *udpSockets) Close() error {
	var errs []error
	u.once.Do(func() {
		u.cancel()
		for _, c := range u.conns {
			errs = append(errs, c.Close())
		}
		u.wg.Wait()
		close(u.ch)
	})
	return errors.Join(errs...)
}
