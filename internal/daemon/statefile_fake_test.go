package daemon

import (
	be "encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"
)

// TestStateFileRestartOnFakeTime is tests/cluster's TestStateFileRestart
// in memory, on fake time: a daemon with a state file is restarted in the
// middle of an overload; the tag spent before the restart is still
// refused after it, its bucket at the very level it was left at (no time
// passes between the stop and the start), while another tag is served;
// the load counts the one tag and the file's size. Bad files (truncated,
// corrupt, oversized, another version, from the future) are ignored,
// counted by reason, and the daemon serves from an empty table.
func TestStateFileRestartOnFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "state")
		spec := fakeSpec{name: "d", text: fmt.Sprintf("[limit]\nrate = 0.01\nburst = 3\nmax_tags = 1000\n[state]\nfile = %q\n", file)}
		d := startFake(t, spec)
		for i := range 5 {
			if got, want := d.ask(t, "spent"), i < 3; got != want {
				t.Fatalf("overload before the restart, query %d: %v, want %v (3 served, then refused)", i+1, got, want)
			}
		}
		d.stop()
		good, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("no state file after a clean stop: %v", err)
		}

		d = startFake(t, spec)
		if d.ask(t, "spent") || !d.ask(t, "fresh") {
			t.Fatal("after the restart: want the spent tag still refused and a fresh one served")
		}
		if v := d.tagView("spent"); !v.Tracked || v.Tokens < 0 || v.Tokens > 1e-9 {
			t.Errorf("the spent tag's bucket after the restart: %+v, want it at 0 tokens, as it was left", v)
		}
		if st := d.StateStats(); !st.Loaded || st.Load.Tags != 1 || st.Load.Bytes != int64(len(good)) || st.Ignored != "" {
			t.Errorf("the load: %+v, want 1 tag (the spent one) read back from the %d bytes saved", st, len(good))
		}
		d.stop()

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
			d := startFake(t, spec)
			if !d.ask(t, "spent") {
				t.Errorf("%s file: the tag refused, want the table empty and the tag served", reason)
			}
			if st := d.StateStats(); st.Loaded || st.Ignored != reason {
				t.Errorf("%s file: %+v, want it ignored as %s", reason, st, reason)
			}
			d.stop()
		}
	})
}
