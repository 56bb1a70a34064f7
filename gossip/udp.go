package gossip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
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

// UDPTransport is a Transport over one UDP socket, sending either to a
// multicast group (ListenMulticast) or to a list of unicast peers
// (ListenUnicast). Combine both with Multi. It is safe for concurrent use;
// the zero value is not usable. It works on Linux only.
type UDPTransport struct {
	conn  *net.UDPConn
	log   *slog.Logger
	dests atomic.Pointer[[]netip.AddrPort] // where Send writes
	ch    chan Packet

	ctx    context.Context // canceled by Close; bounds lookups
	cancel context.CancelFunc
	wg     sync.WaitGroup // reader and resolver goroutines
	once   sync.Once

	// Unicast only.
	resolveMu sync.Mutex // serializes resolve and guards peers
	peers     []*udpPeer
	lookup    func(ctx context.Context, host string) ([]netip.Addr, error)
}

// udpPeer is one configured unicast peer and what its name last resolved to.
type udpPeer struct {
	spec    string         // "host:port" as configured
	host    string         // name or IP literal
	port    uint16         // destination port
	addr    netip.AddrPort // last good address; invalid until resolved
	lastErr string         // last lookup error logged; "" when the last lookup worked
}

// ListenMulticast opens a UDP socket bound to cfg.Group's address and port
// and joins the group, so it receives only that group's datagrams, and
// Send writes to the group.
//
// The socket sets SO_REUSEADDR and SO_REUSEPORT, so several daemons on one
// host can share the group's port; multicast loopback, so they hear each
// other (a transport receives its own datagrams too); and IP_MULTICAST_ALL
// off, so a socket hears only groups it joined itself, never another group
// on the same port that some other socket on the host joined.
//
// Another socket bound to the same port without SO_REUSEADDR, such as a
// unicast transport on ":7777" beside the group "239.255.77.77:7777",
// makes whichever binds second fail with "address already in use": give
// unicast a port of its own.
//
// Over lo, whose address is host-scoped, datagrams arrive From
// "0.0.0.0:<port>", the same for every sender: only the payload tells
// them apart.
func ListenMulticast(cfg MulticastConfig) (*UDPTransport, error) {
	group, err := parseGroup(cfg.Group)
	if err != nil {
		return nil, err
	}
	if cfg.TTL < 0 || cfg.TTL > maxMulticastTTL {
		return nil, fmt.Errorf("gossip: multicast ttl must be between 0 and %d, got %d", maxMulticastTTL, cfg.TTL)
	}
	var ifi *net.Interface // nil: the kernel chooses
	if cfg.Interface != "" {
		if ifi, err = net.InterfaceByName(cfg.Interface); err != nil {
			return nil, fmt.Errorf("gossip: multicast interface %q: %w", cfg.Interface, err)
		}
	}
	conn, err := bindGroup(group)
	if err != nil {
		return nil, err
	}
	if err := joinGroup(conn, group, ifi, cfg.TTL); err != nil {
		conn.Close()
		return nil, err
	}
	t := newUDPTransport(conn, cfg.Logger)
	t.dests.Store(&[]netip.AddrPort{group})
	t.start(false, 0)
	return t, nil
}

// parseGroup checks that s is an IPv4 multicast "address:port".
func parseGroup(s string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return ap, fmt.Errorf("gossip: multicast group %q: want \"address:port\": %w", s, err)
	}
	a := ap.Addr().Unmap()
	switch {
	case !a.IsMulticast():
		return ap, fmt.Errorf("gossip: multicast group %q: %s is not a multicast address", s, a)
	case !a.Is4():
		return ap, fmt.Errorf("gossip: multicast group %q: only IPv4 groups (224.0.0.0/4) are supported", s)
	case ap.Port() == 0:
		return ap, fmt.Errorf("gossip: multicast group %q: port must not be 0", s)
	}
	return netip.AddrPortFrom(a, ap.Port()), nil
}

// joinGroup joins group on ifi (nil: the kernel's choice) and sets the
// options for sending to it.
func joinGroup(conn *net.UDPConn, group netip.AddrPort, ifi *net.Interface, ttl int) error {
	p := ipv4.NewPacketConn(conn)
	on := "the kernel's choice of interface"
	if ifi != nil {
		on = "interface " + ifi.Name
	}
	if err := p.JoinGroup(ifi, &net.UDPAddr{IP: group.Addr().AsSlice()}); err != nil {
		return fmt.Errorf("gossip: joining multicast group %s on %s (is there a route to 224.0.0.0/4?): %w", group.Addr(), on, err)
	}
	if ifi != nil {
		if err := p.SetMulticastInterface(ifi); err != nil {
			return fmt.Errorf("gossip: sending multicast on %s: %w", on, err)
		}
	}
	if err := p.SetMulticastTTL(ttl); err != nil {
		return fmt.Errorf("gossip: setting multicast ttl %d: %w", ttl, err)
	}
	if err := p.SetMulticastLoopback(true); err != nil {
		return fmt.Errorf("gossip: enabling multicast loopback: %w", err)
	}
	return nil
}

// bindGroup opens an IPv4 UDP socket bound to the group's own address and
// port. It makes the socket itself because net.ListenPacket binds a
// multicast address as the wildcard (0.0.0.0:port), which would also take
// in unicast datagrams to that port on any of the host's addresses.
func bindGroup(group netip.AddrPort) (*net.UDPConn, error) {
	fail := func(err error) error {
		return fmt.Errorf("gossip: listening on multicast group %s: %w", group, err)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, fail(os.NewSyscallError("socket", err))
	}
	f := os.NewFile(uintptr(fd), "udp4 "+group.String())
	defer f.Close() // FilePacketConn has its own copy of fd
	err = setSockopts(fd, "udp4", []sockopt{
		{unix.SOL_SOCKET, unix.SO_REUSEADDR, 1, "SO_REUSEADDR"},
		{unix.SOL_SOCKET, unix.SO_REUSEPORT, 1, "SO_REUSEPORT"},
		multicastAllOff,
	})
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(group.Port()), Addr: group.Addr().As4()}); err != nil {
		return nil, fail(os.NewSyscallError("bind", err))
	}
	pc, err := net.FilePacketConn(f)
	if err != nil {
		return nil, fail(err)
	}
	conn, ok := pc.(*net.UDPConn)
	if !ok {
		pc.Close()
		return nil, fail(fmt.Errorf("socket is a %T, not UDP", pc))
	}
	return conn, nil
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
			return fmt.Errorf("gossip: setting %s on %s socket: %w", o.what, network, os.NewSyscallError("setsockopt", err))
		}
	}
	return nil
}

// sockopt is one integer socket option.
type sockopt struct {
	level, name, value int
	what               string
}

// newUDPTransport wraps an open socket; start sets it running.
func newUDPTransport(conn *net.UDPConn, log *slog.Logger) *UDPTransport {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &UDPTransport{conn: conn, log: log, ch: make(chan Packet, udpChanBuffer)}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.dests.Store(&[]netip.AddrPort{})
	return t
}

// start runs the receive loop and, if names is set, the resolver.
func (t *UDPTransport) start(names bool, every time.Duration) {
	t.wg.Add(1)
	go t.receive()
	if names {
		t.wg.Add(1)
		go t.resolveEvery(every)
	}
}

// receive reads datagrams into Packets until Close.
func (t *UDPTransport) receive() {
	defer t.wg.Done()
	buf := make([]byte, udpReadBuffer)
	var backoff time.Duration
	for {
		n, from, err := t.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if t.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Not expected on a UDP socket; back off so a persistent
			// error neither spins nor floods the log.
			backoff = min(max(2*backoff, readBackoffMin), readBackoffMax)
			t.log.Warn("reading datagram failed, retrying", "err", err, "retry_in", backoff)
			select {
			case <-t.ctx.Done():
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		data := make([]byte, n) // exactly n: the receiver may keep it
		copy(data, buf)
		p := Packet{
			Data: data,
			From: netip.AddrPortFrom(from.Addr().Unmap(), from.Port()).String(),
			At:   time.Now(),
		}
		select {
		case t.ch <- p:
		case <-t.ctx.Done():
			return
		}
	}
}

// Send writes b to the multicast group, or to every unicast peer resolved
// so far (none is not an error). It tries every peer and returns their
// errors joined. It does not retain b.
func (t *UDPTransport) Send(b []byte) error {
	if t.ctx.Err() != nil {
		return fmt.Errorf("gossip: send: %w", net.ErrClosed)
	}
	var errs []error
	for _, to := range *t.dests.Load() {
		if _, err := t.conn.WriteToUDPAddrPort(b, to); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Packets returns the received datagrams, in arrival order. Nothing is
// read faster than it is drained: when the channel is full, the socket's
// own buffer fills and the kernel drops datagrams. It is closed by Close.
func (t *UDPTransport) Packets() <-chan Packet { return t.ch }

// LocalAddr returns the address the socket is bound to, such as the port
// chosen for a Bind with port 0.
func (t *UDPTransport) LocalAddr() net.Addr { return t.conn.LocalAddr() }

// Close closes the socket, stops the background goroutines and then closes
// Packets. Calling it again does nothing and returns nil.
func (t *UDPTransport) Close() error {
	var err error
	t.once.Do(func() {
		t.cancel()
		err = t.conn.Close()
		t.wg.Wait()
		close(t.ch)
	})
	return err
}
