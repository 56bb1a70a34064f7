package transport

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// MulticastTransport is a Transport to a multicast group: Send writes to
// the group, and Packets brings the group's datagrams and the unicast
// datagrams peers send back to it (warm start answers). It is safe for
// concurrent use; the zero value is not usable: see ListenMulticast. It
// works on Linux only.
type MulticastTransport struct {
	udpSockets
	group netip.AddrPort
	send  *net.UDPConn // sends to the group and to single peers, and hears their replies
}

// ListenMulticast opens a UDP socket bound to cfg.Group's address and port
// and joins the group, so it receives only that group's datagrams, and a
// second socket on a free port of its own that Send writes to the group
// from. A peer that answers a datagram to its source address (as a warm
// start answer does) reaches that second socket, which nothing else
// shares: several daemons on one host each get their own answers.
//
// The group's socket sets SO_REUSEADDR and SO_REUSEPORT, so several
// daemons on one host can share the group's port; both sockets set
// IP_MULTICAST_ALL off, so a socket hears only groups it joined itself,
// never another group on the same port that some other socket on the host
// joined. Sending has multicast loopback on, so daemons on one host hear
// each other (a transport receives its own datagrams too).
//
// Another socket bound to the group's port without SO_REUSEADDR, such as a
// unicast transport on ":7777" beside the group "239.255.77.77:7777",
// makes whichever binds second fail with "address already in use": give
// unicast a port of its own.
//
// Over lo, whose address is host-scoped, datagrams arrive From
// "0.0.0.0:<port>": only the port and the payload tell senders apart.
func ListenMulticast(cfg MulticastConfig) (*MulticastTransport, error) {
	group, err := parseGroup(cfg.Group)
	if err != nil {
		return nil, err
	}
	if cfg.TTL < 0 || cfg.TTL > maxMulticastTTL {
		return nil, fmt.Errorf("transport: multicast ttl must be between 0 and %d, got %d", maxMulticastTTL, cfg.TTL)
	}
	var ifi *net.Interface // nil: the kernel chooses
	if cfg.Interface != "" {
		if ifi, err = net.InterfaceByName(cfg.Interface); err != nil {
			return nil, fmt.Errorf("transport: multicast interface %q: %w", cfg.Interface, err)
		}
	}
	conn, err := bindGroup(group)
	if err != nil {
		return nil, err
	}
	if err := joinGroup(conn, group, ifi); err != nil {
		conn.Close()
		return nil, err
	}
	lc := net.ListenConfig{Control: unicastControl}
	pc, err := lc.ListenPacket(context.Background(), "udp4", "0.0.0.0:0")
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("transport: opening the socket that sends to %s: %w", group, err)
	}
	send := pc.(*net.UDPConn)
	if err := sendOptions(send, ifi, cfg.TTL); err != nil {
		conn.Close()
		send.Close()
		return nil, err
	}
	t := &MulticastTransport{udpSockets: newUDPSockets(cfg.Logger, conn, send), group: group, send: send}
	t.start()
	return t, nil
}

// Send writes b to the group. It does not retain b.
func (t *MulticastTransport) Send(b []byte) error {
	if err := t.closed(); err != nil {
		return err
	}
	_, err := t.send.WriteToUDPAddrPort(b, t.group)
	return err
}

// SendTo writes b to one peer only, to ("ip:port") as a received Packet's
// From gives it, from the socket Send uses.
func (t *MulticastTransport) SendTo(b []byte, to string) error { return t.sendTo(t.send, b, to) }

// parseGroup checks that s is an IPv4 multicast "address:port".
func parseGroup(s string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return ap, fmt.Errorf("transport: multicast group %q: want \"address:port\": %w", s, err)
	}
	a := ap.Addr().Unmap()
	switch {
	case !a.IsMulticast():
		return ap, fmt.Errorf("transport: multicast group %q: %s is not a multicast address", s, a)
	case !a.Is4():
		return ap, fmt.Errorf("transport: multicast group %q: only IPv4 groups (224.0.0.0/4) are supported", s)
	case ap.Port() == 0:
		return ap, fmt.Errorf("transport: multicast group %q: port must not be 0", s)
	}
	return netip.AddrPortFrom(a, ap.Port()), nil
}

// interfaceName names ifi for errors.
func interfaceName(ifi *net.Interface) string {
	if ifi == nil {
		return "the kernel's choice of interface"
	}
	return "interface " + ifi.Name
}

// joinGroup joins group on ifi (nil: the kernel's choice).
func joinGroup(conn *net.UDPConn, group netip.AddrPort, ifi *net.Interface) error {
	p := ipv4.NewPacketConn(conn)
	if err := p.JoinGroup(ifi, &net.UDPAddr{IP: group.Addr().AsSlice()}); err != nil {
		return fmt.Errorf("transport: joining multicast group %s on %s (is there a route to 224.0.0.0/4?): %w", group.Addr(), interfaceName(ifi), err)
	}
	return nil
}

// sendOptions sets the options for sending to a group from conn: the
// interface (ifi; nil leaves it to the kernel), the hop limit and loopback.
func sendOptions(conn *net.UDPConn, ifi *net.Interface, ttl int) error {
	p := ipv4.NewPacketConn(conn)
	on := interfaceName(ifi)
	if ifi != nil {
		if err := p.SetMulticastInterface(ifi); err != nil {
			return fmt.Errorf("transport: sending multicast on %s: %w", on, err)
		}
	}
	if err := p.SetMulticastTTL(ttl); err != nil {
		return fmt.Errorf("transport: setting multicast ttl %d: %w", ttl, err)
	}
	if err := p.SetMulticastLoopback(true); err != nil {
		return fmt.Errorf("transport: enabling multicast loopback: %w", err)
	}
	return nil
}

// bindGroup opens an IPv4 UDP socket bound to the group's own address and
// port. It makes the socket itself because net.ListenPacket binds a
// multicast address as the wildcard (0.0.0.0:port), which would also take
// in unicast datagrams to that port on any of the host's addresses.
func bindGroup(group netip.AddrPort) (*net.UDPConn, error) {
	fail := func(err error) error {
		return fmt.Errorf("transport: listening on multicast group %s: %w", group, err)
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
