package cluster

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/gossip/wire"
	"github.com/dthrottle/dthrottle/internal/netns"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// TestSnapshotAnswersDropped sends a warmed daemon, from a stranger on its
// bridge, snapshot answers it must not merge: unasked-for (to it, and to
// another node), the same again (a replay), forged under another key,
// truncated, and of another format version. Each is dropped and counted,
// no bucket is lowered, and the daemon keeps serving.
func TestSnapshotAnswersDropped(t *testing.T) {
	if !netns.Run(t) {
		return
	}
	key, _, tp, d := warmedStranger(t)
	id, err := strconv.ParseUint(d.NodeID(t), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	answer := func(k []byte, to uint64) []byte {
		e := wire.Encoder{Node: 0x5eed, MaxPacket: 1400, Key: k}
		var out []byte
		e.EncodeSnapshot(time.Now(), to, []wire.Level{{Key: []byte("victim"), Tokens: -50}}, true, func(p []byte) error {
			out = append([]byte(nil), p...)
			return nil
		})
		return out
	}
	counts := func() (unasked, auth, version float64) {
		fams := harness.Scrape(t, d.AdminAddr(t))
		return harness.Metric(t, fams, "dthrottle_warm_answers_dropped_total", "reason=unasked"),
			harness.Metric(t, fams, "dthrottle_gossip_packets_dropped_total", "reason=auth"),
			harness.Metric(t, fams, "dthrottle_gossip_packets_dropped_total", "reason=version")
	}
	u0, a0, v0 := counts()
	good := answer(key, id)
	tp.Send(t, good)              // unasked: the daemon is not warming
	tp.Send(t, good)              // the same again
	tp.Send(t, answer(key, id+1)) // to another node
	tp.Send(t, answer([]byte("not the cluster's secret, 32 b.."), id))
	tp.Send(t, good[:len(good)-10])
	other := append([]byte(nil), good...)
	other[2] = 9
	tp.Send(t, other)
	harness.Poll(t, 5*time.Second, "every datagram to be dropped and counted", func() bool {
		u, a, v := counts()
		return u-u0 == 3 && a-a0 == 2 && v-v0 == 1
	})
	if v := d.Tag(t, "victim"); v.Tracked {
		t.Errorf("a dropped answer lowered a bucket: %+v", v)
	}
	if got := harness.Pipeline(t, d.Sock, "victim\n"); got != "OK\n" {
		t.Errorf("after the bad answers: %q, want the daemon serving", got)
	}
	u, a, v := counts()
	t.Logf("dropped: %v unasked, %v auth, %v version", u-u0, a-a0, v-v0)
}

// warmedStranger starts one daemon with a secret on a bridge in the
// namespace, and a tap for the test to speak as a stranger on it, and
// waits until the daemon's own warm start is over (nobody answers it). It
// returns the secret, the daemon's config, the tap and the daemon.
func warmedStranger(t *testing.T) ([]byte, harness.NodeConfig, *harness.Tap, *harness.Daemon) {
	t.Helper()
	key := []byte("the cluster's secret, 32 bytes..")
	c := harness.FaultPolicy
	c.Secret = filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(c.Secret, key, 0o600); err != nil {
		t.Fatal(err)
	}
	l := harness.NewLAN(t, 1)
	tp := harness.NewTap(t)
	d := l.Hosts[0].Start(t, c)
	harness.Poll(t, 10*time.Second, "the daemon to be warm (nobody answers it)", func() bool {
		_, ok := harness.Scrape(t, d.AdminAddr(t))["dthrottle_warm_duration_seconds"]
		return ok
	})
	return key, c, tp, d
}
