package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// UnicastTransport is a Transport to a list of unicast peers: Send writes
// to every configured peer's address, and Packets brings what arrives on
// the bound socket. Peers given by name are looked up again periodically,
// and SetPeers replaces them. It is safe for concurrent use; the zero value
// is not usable: see ListenUnicast. It works on Linux only.
type UnicastTransport struct {
	udpSockets
	conn  *net.UDPConn
	dests atomic.Pointer[[]netip.AddrPort] // where Send writes

	resolveMu sync.Mutex // serializes resolve and guards peers and learned
	peers     []*udpPeer
	lookup    func(ctx context.Context, host string) ([]netip.Addr, error)
	learn     learning
}

// udpPeer is one configured unicast peer and what its name last resolved to.
type udpPeer struct {
	spec    string           // "host:port" as configured
	host    string           // name or IP literal
	port    uint16           // destination port
	addrs   []netip.AddrPort // last good addresses; none until resolved
	lastErr string           // last lookup error logged; "" when the last lookup worked
}

// ListenUnicast opens a UDP socket on cfg.Bind; Send writes to every peer
// in cfg.Peers. Peer names are looked up before it returns (a failure is
// logged, not returned, and the peer is skipped until a lookup works) and
// again every cfg.Resolve in the background until Close. A peer that
// resolves to this transport's own address is sent to like any other.
func ListenUnicast(cfg UnicastConfig) (*UnicastTransport, error) {
	return listenUnicast(cfg, func(ctx context.Context, host string) ([]netip.Addr, error) {
		return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	})
}

// listenUnicast is ListenUnicast with the name lookup given.
func listenUnicast(cfg UnicastConfig, lookup func(ctx context.Context, host string) ([]netip.Addr, error)) (*UnicastTransport, error) {
	every := cfg.Resolve
	if every == 0 {
		every = resolveDefault
	}
	if every < 0 {
		return nil, fmt.Errorf("transport: resolve interval must be > 0, got %v", cfg.Resolve)
	}
	peers := make([]*udpPeer, 0, len(cfg.Peers))
	for _, spec := range cfg.Peers {
		p, err := parsePeer(spec)
		if err != nil {
			return nil, err
		}
		peers = append(peers, p)
	}
	lc := net.ListenConfig{Control: unicastControl}
	pc, err := lc.ListenPacket(context.Background(), "udp", cfg.Bind)
	if err != nil {
		return nil, fmt.Errorf("transport: listening on %s: %w", cfg.Bind, err)
	}
	conn := pc.(*net.UDPConn)
	t := &UnicastTransport{udpSockets: newUDPSockets(cfg.Logger, conn), conn: conn, peers: peers, lookup: lookup}
	t.unicast = true
	t.dests.Store(&[]netip.AddrPort{})
	t.resolve()
	t.start()
	// Look names up again periodically, also for a reload that brings
	// names where there were only addresses.
	t.wg.Add(1)
	go t.resolveEvery(every)
	return t, nil
}

// parsePeer parses a "host:port" peer; an IP literal host is resolved at once.
func parsePeer(spec string) (*udpPeer, error) {
	host, port, err := net.SplitHostPort(spec)
	if err != nil {
		return nil, fmt.Errorf("transport: peer %q: want \"host:port\": %w", spec, err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return nil, fmt.Errorf("transport: peer %q: port must be a number from 1 to 65535", spec)
	}
	if host == "" {
		return nil, fmt.Errorf("transport: peer %q: host must not be empty", spec)
	}
	p := &udpPeer{spec: spec, host: host, port: uint16(n)}
	if a, err := netip.ParseAddr(host); err == nil {
		p.addrs = []netip.AddrPort{netip.AddrPortFrom(a.Unmap(), p.port)}
	}
	return p, nil
}

// resolve looks up every peer given by name and publishes the addresses
// Send uses: all of a name's addresses (a headless service, round robin
// DNS), with the peers learned. A failed lookup keeps the peer's previous
// addresses; each new error, recovery or change of addresses is logged
// once.
func (t *UnicastTransport) resolve() {
	t.resolveMu.Lock()
	defer t.resolveMu.Unlock()
	for _, p := range t.peers {
		if _, err := netip.ParseAddr(p.host); err == nil {
			continue // a literal never changes
		}
		ctx, cancel := context.WithTimeout(t.ctx, resolveTimeout)
		addrs, err := t.lookup(ctx, p.host)
		cancel()
		if t.ctx.Err() != nil {
			return // closing
		}
		picked := pickAddrs(addrs)
		if err == nil && len(picked) == 0 {
			err = errors.New("no addresses")
		}
		if err != nil {
			if msg := err.Error(); msg != p.lastErr {
				p.lastErr = msg
				t.log.Warn("cannot resolve peer, keeping its previous addresses",
					"peer", p.spec, "addrs", addrsString(p.addrs), "err", err)
			}
			continue
		}
		next := make([]netip.AddrPort, len(picked))
		for i, a := range picked {
			next[i] = netip.AddrPortFrom(a, p.port)
		}
		switch {
		case p.lastErr != "":
			t.log.Info("peer resolves again", "peer", p.spec, "addrs", addrsString(next))
		case len(p.addrs) > 0 && !slices.Equal(p.addrs, next):
			t.log.Info("peer address changed", "peer", p.spec, "old", addrsString(p.addrs), "addrs", addrsString(next))
		}
		p.lastErr = ""
		p.addrs = next
	}
	t.publish()
}

// publish sets the addresses Send writes to: every configured peer's,
// then the learned ones. Called with resolveMu held.
func (t *UnicastTransport) publish() {
	dests := make([]netip.AddrPort, 0, len(t.peers)+len(t.learn.peers))
	seen := make(map[netip.AddrPort]bool, cap(dests))
	for _, p := range t.peers {
		for _, a := range p.addrs {
			if !seen[a] {
				seen[a] = true
				dests = append(dests, a)
			}
		}
	}
	for _, a := range t.learn.sorted() {
		if !seen[a] && !t.learn.self[a] {
			seen[a] = true
			dests = append(dests, a)
		}
	}
	t.dests.Store(&dests)
	t.learn.version++
}

// pickAddrs keeps the IPv4 addresses, which any socket can reach, or, when
// there is none, every address.
func pickAddrs(addrs []netip.Addr) []netip.Addr {
	var v4, all []netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		if !slices.Contains(all, a) {
			all = append(all, a)
			if a.Is4() {
				v4 = append(v4, a)
			}
		}
	}
	if len(v4) > 0 {
		return v4
	}
	return all
}

func addrsString(aps []netip.AddrPort) string {
	if len(aps) == 0 {
		return "none"
	}
	s := make([]string, len(aps))
	for i, a := range aps {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// resolveEvery looks peer names up again every period until Close.
func (t *UnicastTransport) resolveEvery(every time.Duration) {
	defer t.wg.Done()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
			t.resolve()
		}
	}
}

// Send writes b to every unicast peer resolved so far (none is not an
// error). It tries every peer and returns their errors joined. It does not
// retain b.
func (t *UnicastTransport) Send(b []byte) error {
	if err := t.closed(); err != nil {
		return err
	}
	var errs []error
	for _, to := range *t.dests.Load() {
		if _, err := t.conn.WriteToUDPAddrPort(b, to); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// SendTo writes b to one peer only, to ("ip:port") as a received Packet's
// From gives it.
func (t *UnicastTransport) SendTo(b []byte, to string) error { return t.sendTo(t.conn, b, to) }

// SetPeers replaces the unicast peers, as a reload does, and looks their
// names up at once. On error the peers are unchanged.
func (t *UnicastTransport) SetPeers(specs []string) error {
	peers := make([]*udpPeer, 0, len(specs))
	for _, spec := range specs {
		p, err := parsePeer(spec)
		if err != nil {
			return err
		}
		peers = append(peers, p)
	}
	t.resolveMu.Lock()
	t.peers = peers
	t.resolveMu.Unlock()
	t.resolve()
	return nil
}
