package hostile

import (
	"bytes"
	bin "encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// attached is a daemon's shared table as a client maps it: the table
// file read-only, the state file read-write.
type attached struct {
	table, state []byte
	// From the table file's header.
	recordsOff, recordsSize, dirtyOff, countersOff uint64
	shards, shardTable                             uint64
	ones                                           []byte // 0xFF, as long as the longest area the writer fills
}

// attachState attaches to the daemon listening on the Unix socket sock as
// docs/shared-table.md says: an empty line carrying a descriptor, "OK\n"
// back carrying the table file and the state file. The mappings last
// until the test ends.
func attachState(t *testing.T, sock string) *attached {
	t.Helper()
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	uc := c.(*net.UnixConn)
	uc.SetDeadline(time.Now().Add(5 * time.Second))
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if _, _, err := uc.WriteMsgUnix([]byte("\n"), syscall.UnixRights(int(null.Fd())), nil); err != nil {
		t.Fatalf("attach request: %v", err)
	}
	buf := make([]byte, 3)
	oob := make([]byte, syscall.CmsgSpace(2*4))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil || n != 3 || string(buf) != "OK\n" {
		t.Fatalf("attach answer %q: %v", buf[:n], err)
	}
	msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("attach: no descriptors (%v): is share_table on?", err)
	}
	fds, err := syscall.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 2 {
		t.Fatalf("attach: %d descriptors (%v), want 2", len(fds), err)
	}
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	a := &attached{table: mapFile(t, fds[0], unix.PROT_READ), state: mapFile(t, fds[1], unix.PROT_READ|unix.PROT_WRITE)}
	le := bin.LittleEndian
	h := a.table
	if string(h[:8]) != "DTHTBL\x00\x01" {
		t.Fatalf("table file magic %q", h[:8])
	}
	a.shards, a.shardTable = uint64(le.Uint32(h[12:])), le.Uint64(h[72:])
	a.recordsOff, a.recordsSize = le.Uint64(h[80:]), le.Uint64(h[88:])
	a.dirtyOff, a.countersOff = le.Uint64(h[96:]), le.Uint64(h[104:])
	a.ones = bytes.Repeat([]byte{0xFF}, int(max(a.recordsSize/64, a.dirtyOff-a.countersOff)))
	return a
}

// mapFile maps the whole of fd, shared, until the test ends.
func mapFile(t *testing.T, fd, prot int) []byte {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	b, err := unix.Mmap(fd, 0, int(st.Size), prot, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

// records appends to dst the offsets in the state file of the records the
// table file's index holds now, as a client finds them.
func (a *attached) records(dst []uint64) []uint64 {
	le := bin.LittleEndian
	for s := range a.shards {
		w := le.Uint64(a.table[a.shardTable+64*s:])
		off, n := (w>>32)*8, w&0xFFFFFFFF
		if off+8*n > uint64(len(a.table)) {
			continue
		}
		for i := range n {
			if ref := le.Uint64(a.table[off+8*i:]) & 0xFFFFFFFF; ref != 0 && 8*ref+64 <= a.recordsSize {
				dst = append(dst, a.recordsOff+8*ref)
			}
		}
	}
	return dst
}

// Key lengths the writer puts in records: the longest a daemon could
// keep (a digest key at the highest max_tag_bytes, 65537 bytes), round
// numbers around it, and lengths no varint of four bytes ends in.
var garbageKeyLens = [][]byte{
	bin.AppendUvarint(nil, 65537),
	bin.AppendUvarint(nil, 65536),
	bin.AppendUvarint(nil, 1<<21-1),
	bin.AppendUvarint(nil, math.MaxUint32),
	bin.AppendUvarint(nil, math.MaxUint64),
}

// writeGarbage writes one pass of garbage over the state file, the kind
// chosen by pass: random 8-byte words anywhere in the file; every
// record's unreported and refused at their maximum and every dirty bit
// set; every record's key length a huge varint; every record's tat at
// INT64_MIN; a zeroed stretch of the record area; every counter at its
// maximum. It returns the bytes it wrote.
func (a *attached) writeGarbage(pass int, rng *rand.Rand, recs []uint64) int {
	le := bin.LittleEndian
	st := a.state
	switch pass % 6 {
	case 0:
		const words = 1 << 15
		for range words {
			le.PutUint64(st[rng.Uint64N(uint64(len(st))/8)*8:], rng.Uint64())
		}
		return 8 * words
	case 1:
		for _, r := range recs {
			le.PutUint64(st[r+8:], math.MaxUint64) // unreported and refused
		}
		dirty := st[a.dirtyOff : a.dirtyOff+a.recordsSize/64]
		copy(dirty, a.ones)
		return 8*len(recs) + len(dirty)
	case 2:
		for i, r := range recs {
			copy(st[r+18:], garbageKeyLens[(pass/6+i)%len(garbageKeyLens)])
		}
		return 5 * len(recs)
	case 3:
		for _, r := range recs {
			le.PutUint64(st[r:], 1<<63) // INT64_MIN
		}
		return 8 * len(recs)
	case 4:
		const span = 64 << 10
		off := a.recordsOff + rng.Uint64N(a.recordsSize/span)*span
		clear(st[off : off+span])
		return span
	default:
		counters := st[a.countersOff:a.dirtyOff]
		copy(counters, a.ones)
		return len(counters)
	}
}

// garbageWriter writes garbage over an attached state file, in spells,
// each pass of a kind in turn (writeGarbage). A spell at a time.
type garbageWriter struct {
	a      *attached
	rng    *rand.Rand
	recs   []uint64
	pass   int
	wrote  int64         // bytes written
	passes int           // passes made
	busy   time.Duration // time spent writing
}

// spell writes pass after pass until stop is closed, resting between two
// passes three times as long as the last one took: about a quarter of a
// core, whatever the machine (on two cores shared with the clients and
// the daemon, a writer that never rests takes a core from them by
// itself).
func (w *garbageWriter) spell(stop <-chan struct{}) {
	rest := time.NewTimer(0)
	defer rest.Stop()
	for {
		select {
		case <-stop:
			return
		case <-rest.C:
		}
		t0 := time.Now()
		if w.pass%6 == 0 {
			w.recs = w.a.records(w.recs[:0])
		}
		w.wrote += int64(w.a.writeGarbage(w.pass, w.rng, w.recs))
		w.pass++
		w.passes++
		took := time.Since(t0)
		w.busy += took
		rest.Reset(3 * took)
	}
}

// rssAnonKiB returns the private memory of process pid (RssAnon: its
// heap and stacks, not the shared table's files), in KiB.
func rssAnonKiB(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(`(?m)^RssAnon:\s+(\d+) kB$`).FindSubmatch(b)
	if m == nil {
		return 0, fmt.Errorf("no RssAnon in /proc/%d/status", pid)
	}
	return strconv.ParseInt(string(m[1]), 10, 64)
}
