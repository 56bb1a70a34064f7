package cluster

import (
	be "encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/tests/harness"
)

// TestStateFileRestart: a daemon with a state file is restarted in the
// middle of an overload; a tag spent before the restart is still refused
// after it, while another tag is served. Bad files (truncated, corrupt,
// oversized, another version, from the future) are ignored, counted by
// reason, and the daemon serves from an empty table.
func TestStateFileRestart(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "state")
	cfg := fmt.Sprintf(`[listen]
unix = "%%SOCK%%"
[limit]
rate = 0.01
burst = 3
max_tags = 1000
[state]
file = %q
[admin]
http = "127.0.0.1:0"
`, file)
	d := harness.StartDaemon(t, cfg)
	if got := harness.NC(t, strings.Repeat("spent\n", 5), "-N", "-U", d.Sock); got != "OK\nOK\nOK\nNO\nNO\n" {
		t.Fatalf("overload before the restart: %q", got)
	}
	d.Stop(t)
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("no state file after a clean stop: %v", err)
	}

	d = harness.StartDaemon(t, cfg)
	if got := harness.NC(t, "spent\nfresh\n", "-N", "-U", d.Sock); got != "NO\nOK\n" {
		t.Fatalf("after the restart: %q, want the spent tag still refused and a fresh one served", got)
	}
	fams := harness.Scrape(t, d.AdminAddr(t))
	if got := harness.Metric(t, fams, "dthrottle_state_load_tags"); got != 1 {
		t.Errorf("dthrottle_state_load_tags = %v, want 1 (the spent tag)", got)
	}
	if got := harness.Metric(t, fams, "dthrottle_state_load_bytes"); got != float64(len(good)) {
		t.Errorf("dthrottle_state_load_bytes = %v, want %d", got, len(good))
	}
	d.Stop(t)

	// reseal recomputes the checksum, so that only the change is wrong.
	reseal := func(b []byte) []byte {
		n := len(b) - 4
		be.BigEndian.PutUint32(b[n:], crc32.Checksum(b[:n], crc32.MakeTable(crc32.Castagnoli)))
		return b
	}
	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for reason, content := range map[string][]byte{
		"truncated": good[:len(good)-7],
		"corrupt":   edit(func(b []byte) []byte { b[len(b)-6] ^= 0xff; return b }),
		"version":   edit(func(b []byte) []byte { be.BigEndian.PutUint16(b[4:], 99); return reseal(b) }),
		"future": edit(func(b []byte) []byte {
			be.BigEndian.PutUint64(b[8:], uint64(time.Now().Add(time.Hour).UnixNano()))
			return reseal(b)
		}),
		"oversized": append(append([]byte(nil), good...), make([]byte, 1<<20)...),
	} {
		if err := os.WriteFile(file, content, 0o600); err != nil {
			t.Fatal(err)
		}
		d := harness.StartDaemon(t, cfg)
		if got := harness.NC(t, "spent\n", "-N", "-U", d.Sock); got != "OK\n" {
			t.Errorf("%s file: %q, want the table empty and the tag served", reason, got)
		}
		fams := harness.Scrape(t, d.AdminAddr(t))
		if got := harness.Metric(t, fams, "dthrottle_state_ignored", "reason="+reason); got != 1 {
			t.Errorf("%s file: dthrottle_state_ignored{reason=%s} = %v, want 1", reason, reason, got)
		}
		d.Stop(t)
	}
}
