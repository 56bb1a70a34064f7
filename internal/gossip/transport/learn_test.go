package transport

import (
	"fmt"
	"net"
	"slices"
	"testing"
	"time"
)

// TestLearningRules walks a unicast transport's learning on its own: off
// until SetLearning, capped at max_peers, never an unspecified address or
// its own, a peer heard from kept and one only told of dropped once
// silent, everything learned dropped when learning is turned off.
func TestLearningRules(t *testing.T) {
	a := listenLocal(t, nil)
	port := a.LocalAddr().(*net.UDPAddr).Port
	now := time.Unix(1e9, 0)
	a.Heard("10.0.0.1:7777", now)
	if got := a.DiscoveryStats(); got.Learned != 0 {
		t.Fatalf("learned %d peers before SetLearning (learning is off)", got.Learned)
	}
	a.SetLearning(2)
	a.SilentAfter(time.Second)
	a.Heard("10.0.0.1:7777", now)
	a.Told("10.0.0.2:7777", now)
	a.Heard("10.0.0.3:7777", now) // over max_peers
	a.Heard("0.0.0.0:7777", now)  // never an address to send to
	a.Heard(fmt.Sprintf("127.0.0.1:%d", port), now)
	a.Self(fmt.Sprintf("127.0.0.1:%d", port))
	st := a.DiscoveryStats()
	if st.Learned != 2 || st.Added != 2 || st.Refused != 2 {
		t.Fatalf("after learning: %+v; want 2 learned and added, 2 refused (max_peers reached)", st)
	}
	if got, want := dests(a), []string{"10.0.0.1:7777", "10.0.0.2:7777"}; !slices.Equal(got, want) {
		t.Fatalf("sending to %v, want %v", got, want)
	}
	if ads, _ := a.Advert(now); len(ads) != 1 || ads[0] != "10.0.0.1:7777" {
		t.Fatalf("advertising %v: want only the peer heard from itself", ads)
	}
	if a.Found("10.0.0.2:7777") != FoundLearned || a.Found("10.0.0.9:7777") != "" {
		t.Fatal("Found does not tell learned peers from others")
	}
	// Heard again keeps a peer; one only told of is forgotten once silent.
	a.Heard("10.0.0.1:7777", now.Add(900*time.Millisecond))
	a.Heard("10.0.0.1:7777", now.Add(1500*time.Millisecond))
	if got, want := dests(a), []string{"10.0.0.1:7777"}; !slices.Equal(got, want) {
		t.Fatalf("after the silence timeout, sending to %v, want %v", got, want)
	}
	a.SetLearning(0)
	if st := a.DiscoveryStats(); st.Learned != 0 || st.Forgotten != 2 {
		t.Fatalf("after turning learning off: %+v", st)
	}
	if got := dests(a); len(got) != 0 {
		t.Fatalf("sending to %v with learning off", got)
	}
}
