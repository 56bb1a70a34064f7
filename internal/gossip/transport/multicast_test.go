package transport

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/netns"
)

func TestMulticastConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  MulticastConfig
		want string
	}{
		{MulticastConfig{Group: "[ff02::1]:7777"}, "only IPv4"},
		{MulticastConfig{Group: "10.0.0.1:7777"}, "not a multicast address"},
		{MulticastConfig{Group: "239.255.77.77"}, "address:port"},
		{MulticastConfig{Group: "239.255.77.77:0"}, "port"},
		{MulticastConfig{Group: "239.255.77.77:7777", TTL: 256}, "ttl"},
		{MulticastConfig{Group: "239.255.77.77:7777", TTL: -1}, "ttl"},
		{MulticastConfig{Group: "239.255.77.77:7777", Interface: "no-such-if0"}, "no-such-if0"},
	} {
		// Each fails before a socket is opened: nothing is sent or joined.
		tr, err := ListenMulticast(c.cfg)
		if err == nil {
			tr.Close()
			t.Fatalf("ListenMulticast(%+v) succeeded, want an error", c.cfg)
		}
		if !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "transport: ") {
			t.Errorf("ListenMulticast(%+v) = %q, want a transport error mentioning %q", c.cfg, err, c.want)
		}
	}
}

// TestMulticast runs in a namespace of its own: three transports joined to
// one group on lo hear each other and themselves; a transport on another
// group with the same port hears none of it, nor they it, and unicast to
// the port reaches none of them.
func TestMulticast(t *testing.T) {
	if !netns.Run(t) {
		return
	}
	const group, otherGroup = "239.255.77.77:7777", "239.255.77.78:7777"
	var members []*MulticastTransport
	for _, ifname := range []string{"", "", "lo"} {
		m, err := ListenMulticast(MulticastConfig{Group: group, Interface: ifname, TTL: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if got := m.LocalAddr().String(); got != group {
			t.Errorf("bound to %s, want the group's own address %s", got, group)
		}
		members = append(members, m)
	}
	other, err := ListenMulticast(MulticastConfig{Group: otherGroup, TTL: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	// The other group first: once it hears itself, its datagram has been
	// delivered to every socket it will ever reach, so a member that got
	// it would read it before the members' own datagrams below.
	if err := other.Send([]byte("other-1")); err != nil {
		t.Fatal(err)
	}
	if got := collect(t, "other", other, "other-1"); len(got) != 0 {
		t.Errorf("other group received %v", got)
	}
	// Unicast to the group's port on lo, likewise before the members send.
	uni, err := ListenUnicast(UnicastConfig{Bind: "127.0.0.1:0", Peers: []string{"127.0.0.1:7777"}})
	if err != nil {
		t.Fatal(err)
	}
	defer uni.Close()
	if err := uni.Send([]byte("unicast")); err != nil {
		t.Fatal(err)
	}

	want := make([]string, len(members))
	for i, m := range members {
		want[i] = fmt.Sprintf("member-%d", i)
		if err := m.Send([]byte(want[i])); err != nil {
			t.Fatal(err)
		}
	}
	for i, m := range members {
		if got := collect(t, fmt.Sprintf("member %d", i), m, want...); len(got) != 0 {
			t.Errorf("member %d received %v from outside its group", i, got)
		}
	}

	// The members' datagrams have all been delivered by now; one the other
	// group wrongly received would come before this one.
	if err := other.Send([]byte("other-2")); err != nil {
		t.Fatal(err)
	}
	if got := collect(t, "other", other, "other-2"); len(got) != 0 {
		t.Errorf("other group received %v from the first group", got)
	}
}

// TestMulticastReply: a member of a group that answers a datagram to its
// source address reaches the sender alone, even with another member of
// the same group on the same host.
func TestMulticastReply(t *testing.T) {
	if !netns.Run(t) {
		return
	}
	const group = "239.255.77.77:7777"
	var ms []*MulticastTransport
	for range 3 {
		m, err := ListenMulticast(MulticastConfig{Group: group, Interface: "lo", TTL: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		ms = append(ms, m)
	}
	asker, answerer, other := ms[0], ms[1], ms[2]
	if err := asker.Send([]byte("ask")); err != nil {
		t.Fatal(err)
	}
	var from string
	for from == "" {
		p := receive(t, answerer.Packets())
		if string(p.Data) == "ask" {
			from = p.From
		}
	}
	if err := answerer.SendTo([]byte("answer"), from); err != nil {
		t.Fatal(err)
	}
	if got := collect(t, "asker", asker, "ask", "answer"); len(got) != 0 {
		t.Errorf("asker received %v besides its question and the answer", got)
	}
	// The other member hears the question on the group, never the answer:
	// once its own datagram comes back, the answer would have come first.
	if err := other.Send([]byte("mark")); err != nil {
		t.Fatal(err)
	}
	if got := collect(t, "other", other, "ask", "mark"); len(got) != 0 {
		t.Errorf("another member received %v", got)
	}
}

// collect reads tr's packets until every one of want has arrived, and
// returns the unexpected payloads read meanwhile. Duplicates of a wanted
// payload are logged, not returned.
func collect(t *testing.T, name string, tr Transport, want ...string) (unexpected []string) {
	t.Helper()
	missing := map[string]bool{}
	for _, w := range want {
		missing[w] = true
	}
	seen := map[string]int{}
	deadline := time.After(udpWait)
	for len(missing) > 0 {
		select {
		case p, ok := <-tr.Packets():
			if !ok {
				t.Fatalf("%s: Packets closed", name)
			}
			s := string(p.Data)
			switch {
			case missing[s]:
				delete(missing, s)
			case seen[s] > 0:
				t.Logf("%s: duplicate %q from %s", name, s, p.From)
			default:
				unexpected = append(unexpected, s)
			}
			seen[s]++
		case <-deadline:
			t.Fatalf("%s: still missing %v after %v (got %v)", name, keys(missing), udpWait, seen)
		}
	}
	return unexpected
}

func keys(m map[string]bool) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}
