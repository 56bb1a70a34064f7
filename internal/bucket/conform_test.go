package bucket

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// The conformance cases pin the shared table's layout and the in-process
// decision bit for bit, for every implementation: this package's View
// and libdthrottle's dt_decide run the same operations on the
// same files and must leave the same bytes (docs/shared-table.md). A
// case NAME in testdata/shared is NAME.table and NAME.state (the files
// before), NAME.ops (lines "<now ns> <tag hex, or -> <OK|NO|ASK|LEFT>")
// and NAME.after (the state file after the operations). The files are
// sparse: "DTSPARSE", the size as a uint64, then each page that is not
// all zero as its offset (uint64) and its 4096 bytes.

var updateConform = flag.Bool("update-conform", false, "write the conformance cases in testdata/shared anew")

const confDir = "testdata/shared"

// conformCase makes a table, fills it through the daemon's own path, and
// lists the operations a caller runs on it.
type conformCase struct {
	name     string
	def      Policy
	policies []Policy
	maxTags  int
	setup    []string // tags the daemon is asked about first, at t0
	stated   []statedSetup
	ops      []string // "<seconds after t0> <tag>"
}

var conformCases = []conformCase{
	{
		name: "policies", def: Policy{Rate: 1, Burst: 3}, maxTags: 1000,
		policies: []Policy{
			{Prefix: "login:", Rate: 0.5, Burst: 1}, {Prefix: "login:admin", Rate: 2, Burst: 2},
			{Prefix: "ok:", Action: Allow}, {Prefix: "no:", Action: Deny},
			{Prefix: "dry:", Rate: 1, Burst: 1, DryRun: true}, {Prefix: "nodry:", Action: Deny, DryRun: true},
		},
		setup: []string{"a", "192.168.100.200", "login:x", "login:admin1", "dry:1", "a-tag-longer-than-sixteen-bytes"},
		ops: []string{"0 a", "0 a", "0 a", "0.5 a", "0.9 a", "0 192.168.100.200", "0 login:x", "0 login:admin1",
			"0 login:admin1", "0 login:admin1", "0.6 login:admin1", "0 ok:1", "0 no:1", "0 nodry:1", "0 dry:1", "0 dry:1",
			"0 a-tag-longer-than-sixteen-bytes", "0 unknown", "0 ", "0.2 " + strings.Repeat("x", 70), "2 a"},
	},
	{
		name: "shards", def: Policy{Rate: 10, Burst: 2}, maxTags: 200000,
		setup: func() []string {
			var s []string
			for i := range 300 {
				s = append(s, fmt.Sprintf("10.0.%d.%d", i/256, i%256))
			}
			return s
		}(),
		ops: func() []string {
			var s []string
			for i := range 300 {
				s = append(s, fmt.Sprintf("0.%d 10.0.%d.%d", i%10, i/256, i%256), fmt.Sprintf("0.%d 10.0.%d.%d", i%10, i/256, i%256))
			}
			return s
		}(),
	},
	{
		// Tags under limits their callers stated (quota_shared.go): a
		// leaky bucket, a window aligned to its length (t0 is 03:04:05,
		// its minute ends at 55 s), a calendar window (asked), and a
		// stated limit under a dry run's prefix (served, counted dry).
		name: "stated", def: Policy{Rate: 100, Burst: 100}, maxTags: 1000,
		policies: []Policy{{Prefix: "dry:", Rate: 100, Burst: 100, DryRun: true}},
		setup:    []string{"plain"},
		stated: []statedSetup{
			{"leaky", Quota{Algorithm: Leaky, Burst: 3, Rate: 0.05}},
			{"win", Quota{Algorithm: Window, Burst: 2, Period: time.Minute}},
			{"cal", Quota{Algorithm: Window, Burst: 5, Calendar: Day}},
			{"dry:1", Quota{Algorithm: Leaky, Burst: 1, Rate: 1}},
			{"fast", Quota{Algorithm: Leaky, Burst: 2, Rate: 4}},
		},
		ops: []string{"0 leaky", "0 leaky", "0 leaky", "0.5 leaky", "0 win", "0.5 win", "0.9 win",
			"0 cal", "0 dry:1", "0 dry:1", "0 plain", "0.9 leaky", "0 fast", "0 fast", "0.25 fast", "0.3 fast", "1 fast"},
	},
}

// statedSetup is a tag the daemon is asked about under a limit its
// caller states, at t0.
type statedSetup struct {
	tag   string
	quota Quota
}

func TestConformance(t *testing.T) {
	if *updateConform {
		for _, c := range conformCases {
			writeCase(t, c)
		}
	}
	names, _ := filepath.Glob(filepath.Join(confDir, "*.ops"))
	if len(names) < len(conformCases) {
		t.Fatalf("%d conformance cases in %s, want %d: go test ./internal/bucket -run TestConformance -update-conform", len(names), confDir, len(conformCases))
	}
	for _, ops := range names {
		name := strings.TrimSuffix(filepath.Base(ops), ".ops")
		t.Run(name, func(t *testing.T) {
			base := filepath.Join(confDir, name)
			table, state, after := readSparse(t, base+".table"), readSparse(t, base+".state"), readSparse(t, base+".after")
			v, err := NewView(table, state)
			if err != nil {
				t.Fatal(err)
			}
			for i, op := range readOps(t, ops) {
				if got := codeName(v.Decide(op.now, op.tag).Code); got != op.want {
					t.Fatalf("op %d (%q at %d): %s, want %s", i+1, op.tag, op.now, got, op.want)
				}
			}
			if want, err := os.ReadFile(base + ".policies"); err != nil {
				t.Fatal(err)
			} else if got := policyLines(v); got != string(want) {
				t.Fatalf("policies as the view states them:\n%s\nwant (%s.policies):\n%s", got, name, want)
			}
			foldCounters(table, state)
			foldCounters(table, after)
			if i := firstDiff(state, after); i >= 0 {
				t.Fatalf("state differs from %s.after at byte %d", name, i)
			}
		})
	}
}

func writeCase(t *testing.T, c conformCase) {
	tb, err := New(Config{Default: c.def, Policies: c.policies, MaxTags: c.maxTags, MaxTagBytes: 64, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range c.setup {
		tb.Allow(at(0), []byte(tag))
	}
	for _, st := range c.stated {
		if _, err := tb.AllowQuota(at(0), []byte(st.tag), Request{Quota: st.quota, Hits: 1}); err != nil {
			t.Fatal(err)
		}
	}
	tb.Beat(at(0))
	base := filepath.Join(confDir, c.name)
	writeSparse(t, base+".table", tb.reg.ro)
	writeSparse(t, base+".state", tb.reg.rw)
	v, err := NewView(tb.reg.ro, tb.reg.rw)
	if err != nil {
		t.Fatal(err)
	}
	var ops strings.Builder
	for _, op := range c.ops {
		sec, tag, _ := strings.Cut(op, " ")
		f, _ := strconv.ParseFloat(sec, 64)
		d := v.Decide(ns(f), []byte(tag))
		h := "-"
		if tag != "" {
			h = hex.EncodeToString([]byte(tag))
		}
		fmt.Fprintf(&ops, "%d %s %s\n", ns(f), h, codeName(d.Code))
	}
	writeSparse(t, base+".after", tb.reg.rw)
	if err := os.WriteFile(base+".policies", []byte(policyLines(v)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(base+".ops", []byte(ops.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func codeName(c Code) string { return [...]string{"NO", "OK", "ASK", "LEFT"}[c] }

type confOp struct {
	now  int64
	tag  []byte
	want string
}

func readOps(t *testing.T, path string) []confOp {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []confOp
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 {
			t.Fatalf("%s: bad line %q", path, sc.Text())
		}
		now, _ := strconv.ParseInt(fs[0], 10, 64)
		var tag []byte
		if fs[1] != "-" {
			if tag, err = hex.DecodeString(fs[1]); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, confOp{now, tag, fs[2]})
	}
	return out
}

func writeSparse(t *testing.T, path string, b []byte) {
	var out bytes.Buffer
	out.WriteString("DTSPARSE")
	binary.Write(&out, binary.LittleEndian, uint64(len(b)))
	zero := make([]byte, 4096)
	for off := 0; off < len(b); off += 4096 {
		page := b[off:min(off+4096, len(b))]
		if bytes.Equal(page, zero[:len(page)]) {
			continue
		}
		binary.Write(&out, binary.LittleEndian, uint64(off))
		out.Write(page)
		out.Write(zero[len(page):])
	}
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readSparse reads a sparse file into memory 8-byte aligned.
func readSparse(t *testing.T, path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 16 || string(b[:8]) != "DTSPARSE" {
		t.Fatalf("%s: not a sparse file", path)
	}
	size := binary.LittleEndian.Uint64(b[8:])
	w := make([]uint64, (size+7)/8)
	out := unsafeBytes(w)[:size]
	for p := b[16:]; len(p) >= 8+4096; p = p[8+4096:] {
		off := binary.LittleEndian.Uint64(p)
		copy(out[off:min(off+4096, size)], p[8:])
	}
	return out
}

func firstDiff(a, b []byte) int {
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

func unsafeBytes(w []uint64) []byte {
	if len(w) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), len(w)*8)
}

// policyLines states every policy of v as dt_conform reads NAME.policies:
// <index> <name in hex> <action> <dry_run> <burst> <rate's bits in hex>.
func policyLines(v *View) string {
	var b strings.Builder
	for i := 0; ; i++ {
		p, ok := v.Policy(i)
		if !ok {
			return b.String()
		}
		dry := 0
		if p.DryRun {
			dry = 1
		}
		fmt.Fprintf(&b, "%d %s %d %d %d %016x\n", i, hex.EncodeToString([]byte(p.Name)), p.Action, dry, p.Burst, math.Float64bits(p.Rate))
	}
}

// foldCounters moves every stripe's counters of state into stripe 0: a
// decision counts in its CPU's stripe, so states agree when their sums
// per policy do (as dt_conform compares them).
func foldCounters(table, state []byte) {
	le := binary.LittleEndian
	off, counted := le.Uint64(table[hdrCountersOff:]), uint64(le.Uint32(table[hdrCountedPolicys:]))
	for si := uint64(1); si < counterStripes; si++ {
		for i := uint64(0); i < counted*counterWords; i++ {
			from, to := off+(si*counted*counterWords+i)*8, off+i*8
			le.PutUint64(state[to:], le.Uint64(state[to:])+le.Uint64(state[from:]))
			le.PutUint64(state[from:], 0)
		}
	}
}
