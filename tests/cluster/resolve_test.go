package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/netns"
	"github.com/dthrottle/dthrottle/internal/testkit"
	"github.com/dthrottle/dthrottle/tests/harness"
)

// TestPeerNameResolvesToThree: a daemon whose only peer is a name that
// resolves to three addresses sends its reports to all three. The name is
// in a hosts file of the test's own, bind-mounted over /etc/hosts in a
// mount namespace made for that daemon alone (unshare --mount, whose
// mounts are private): the host's /etc/hosts and DNS are never read. The
// three receivers are configured with the sender's address; each must hear
// it and apply the hits it reports, and the sender must say it found them
// by resolving.
func TestPeerNameResolvesToThree(t *testing.T) {
	if !netns.Run(t) {
		return
	}
	unshare := netns.Tool(t, "unshare")
	mount := netns.Tool(t, "mount")
	l := harness.NewLAN(t, 4)
	sender, receivers := l.Hosts[3], l.Hosts[:3]

	hosts := filepath.Join(t.TempDir(), "hosts")
	var lines []string
	for _, h := range receivers {
		lines = append(lines, h.Addr+" trio.cluster.test")
	}
	if err := os.WriteFile(hosts, []byte("127.0.0.1 localhost\n"+strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	config := func(h *harness.Host, peer string) string {
		return fmt.Sprintf(`[listen]
unix = "%%SOCK%%"
[limit]
rate = 1
burst = 100
[gossip]
interval = %q
peers = [%q]
bind = "%s:7777"
[admin]
http = "%s:0"
`, harness.LANInterval.String(), peer, h.Addr, h.Addr)
	}
	var ds []*harness.Daemon
	for _, h := range receivers {
		if err := h.Ns.Do(func() error { ds = append(ds, harness.StartDaemon(t, config(h, sender.Addr+":7777"))); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	var s *harness.Daemon
	if err := sender.Ns.Do(func() error {
		s = startResolving(t, config(sender, "trio.cluster.test:7777"), hosts, unshare, mount)
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	testkit.WaitFor(t, 10*time.Second, "the sender to hear the three receivers", func() bool {
		return harness.Metric(t, harness.Scrape(t, s.AdminAddr(t)), "dthrottle_gossip_peers") == 3
	})
	for i, d := range ds {
		id := d.NodeID(t)
		if got := peerFound(t, s, id); got != "resolved" {
			t.Errorf("the sender found receiver %d (%s) %q, want resolved", i+1, receivers[i].Addr, got)
		}
	}

	const tag = "resolved-peers"
	for range 5 {
		if !harness.Ask(t, s.Sock, tag) {
			t.Fatalf("the sender refused %s within its burst", tag)
		}
	}
	sid := s.NodeID(t)
	for i, d := range ds {
		d.AwaitPeer(t, sid, false)
		if got := peerFound(t, d, sid); got != "configured" {
			t.Errorf("receiver %d found the sender %q, want configured", i+1, got)
		}
		testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("receiver %d to apply the sender's hits", i+1), func() bool {
			return d.Tag(t, tag).Tracked
		})
	}
}

// startResolving starts dthrottled with config (as startDaemon does) in a
// mount namespace of its own where hosts is /etc/hosts, with Go's own
// resolver, which reads every address a name has there.
func startResolving(t *testing.T, config, hosts, unshare, mount string) *harness.Daemon {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "d.sock")
	path := filepath.Join(dir, "dthrottle.toml")
	config, admin := harness.PinPort(t, strings.ReplaceAll(config, "%SOCK%", sock), "http")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", "--",
		"/bin/sh", "-c", `"$1" --bind "$2" /etc/hosts && exec "$3" -config "$4"`,
		"sh", mount, hosts, harness.Binary, path)
	d := harness.RunDaemonCmd(t, sock, cmd, "GODEBUG=netdns=go")
	d.Admin = admin
	return d
}
