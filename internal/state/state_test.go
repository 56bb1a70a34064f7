package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

func newTable(t testing.TB, maxTags int) *bucket.Table {
	t.Helper()
	tb, err := bucket.New(bucket.Config{
		Default:     bucket.Policy{Rate: 1, Burst: 4},
		Policies:    []bucket.Policy{{Name: "login", Prefix: "login:", Rate: 0.1, Burst: 2}},
		MaxTags:     maxTags,
		MaxTagBytes: 256,
	})
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

var lim = Limits{MaxAge: time.Minute, MaxTags: 1000, MaxBytes: 1 << 20}

func tokens(t *testing.T, tb *bucket.Table, now time.Time, key string) float64 {
	t.Helper()
	st, err := tb.Peek(now, key)
	if err != nil {
		t.Fatalf("peek %q: %v", key, err)
	}
	return st.Tokens
}

func TestSaveLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	tb := newTable(t, 1000)
	for range 4 {
		tb.Allow(at(0), []byte("spent"))
	}
	tb.Allow(at(0), []byte("one"))
	tb.Spend(at(0), "debt", 10)
	tb.Allow(at(0), []byte("login:bob"))
	tb.Allow(at(0), []byte("full"))
	// At 3 s: spent has 3 tokens, one and full are full again, debt has
	// -3, login:bob 1.3.
	info, err := Save(path, tb, at(3), at(3))
	if err != nil {
		t.Fatal(err)
	}
	if info.Tags != 3 {
		t.Errorf("saved %d tags, want 3 (spent, debt, login:bob)", info.Tags)
	}
	if st, _ := os.Stat(path); st == nil || st.Size() != info.Bytes {
		t.Errorf("file size %v, info says %d", st, info.Bytes)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}

	// Restart 2 s later (wall clock); the new table's clock is unrelated
	// to the wall clock. After 2 s: spent is full, debt -1, login:bob 1.5.
	fresh := newTable(t, 1000)
	clock := t0.Add(time.Hour)
	info, err = Load(path, fresh, clock, at(5), lim)
	if err != nil {
		t.Fatal(err)
	}
	if info.Tags != 3 || info.Adopted != 2 || info.Age != 2*time.Second {
		t.Errorf("loaded %+v, want 3 tags, 2 adopted, age 2s", info)
	}
	if got := tokens(t, fresh, clock, "debt"); got != -1 {
		t.Errorf("debt: %v tokens, want -1", got)
	}
	if got := tokens(t, fresh, clock, "login:bob"); got < 1.4999 || got > 1.5 {
		t.Errorf("login:bob: %v tokens, want 1.5", got)
	}
	if _, err := fresh.Peek(clock, "spent"); err != bucket.ErrUnknownTag {
		t.Errorf("spent, full again, was adopted: %v", err)
	}
	if fresh.Allow(clock, []byte("login:bob")) != true || fresh.Allow(clock, []byte("login:bob")) != false {
		t.Error("login:bob does not have 1.5 tokens")
	}
	if fresh.Allow(clock, []byte("debt")) {
		t.Error("a tag in debt was served after the load")
	}
	if hits := fresh.Drain(nil); len(hits) != 1 || hits[0].Key != "login:bob" {
		t.Errorf("drained %v: the file carried unreported hits", hits)
	}
}

// saved returns the bytes of a sound file saved at wall-clock time at(sec).
func saved(t *testing.T, sec float64) []byte {
	t.Helper()
	tb := newTable(t, 1000)
	for i := range 20 {
		tb.Spend(at(sec), fmt.Sprint("tag", i), uint32(i+1))
	}
	var e Encoder
	e.Reset()
	tb.Export(at(sec), func(ls []bucket.Level) error { e.Add(ls); return nil })
	return append([]byte(nil), e.Finish(at(sec), tb.Fingerprint())...)
}

// resum rewrites the checksum after a change to the header or records.
func resum(b []byte) []byte {
	end := len(b) - crcLen
	binary.BigEndian.PutUint32(b[end:], crc32.Checksum(b[:end], castagnoli))
	return b
}

func TestBadFilesIgnored(t *testing.T) {
	good := saved(t, 0)
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	cases := []struct {
		name string
		b    []byte
		now  float64
		lim  Limits
		want error
	}{
		{"empty", nil, 1, lim, ErrTruncated},
		{"magic only", []byte("DTS"), 1, lim, ErrTruncated},
		{"header cut", good[:20], 1, lim, ErrTruncated},
		{"records cut", good[:len(good)-30], 1, lim, ErrTruncated},
		{"checksum cut", good[:len(good)-1], 1, lim, ErrTruncated},
		{"garbage", []byte("this is not a state file at all, not at all, not at all"), 1, lim, ErrCorrupt},
		{"byte flipped", mod(func(b []byte) []byte { b[50] ^= 1; return b }), 1, lim, ErrCorrupt},
		{"bytes appended", append(append([]byte(nil), good...), 0), 1, lim, ErrCorrupt},
		{"count too high", mod(func(b []byte) []byte { b[31]++; return resum(b) }), 1, lim, ErrCorrupt},
		{"count too low", mod(func(b []byte) []byte { b[31]--; return resum(b) }), 1, lim, ErrCorrupt},
		{"key length zero", mod(func(b []byte) []byte { b[headerLen] = 0; return resum(b) }), 1, lim, ErrCorrupt},
		{"NaN level", mod(func(b []byte) []byte {
			kl := int(b[headerLen])
			binary.BigEndian.PutUint64(b[headerLen+1+kl:], 0x7ff8000000000001)
			return resum(b)
		}), 1, lim, ErrCorrupt},
		{"version 3", mod(func(b []byte) []byte { b[5] = 3; return resum(b) }), 1, lim, ErrVersion},
		{"version 3 unsummed", mod(func(b []byte) []byte { b[5] = 3; return b }), 1, lim, ErrVersion},
		{"from the future", good, -1, lim, ErrFuture},
		{"stale", good, 61, lim, ErrStale},
		{"too many tags", good, 1, Limits{MaxAge: time.Minute, MaxTags: 19, MaxBytes: 1 << 20}, ErrOversized},
		{"too many bytes", good, 1, Limits{MaxAge: time.Minute, MaxTags: 100, MaxBytes: int64(len(good) - 1)}, ErrOversized},
	}
	dir := t.TempDir()
	for i, c := range cases {
		path := filepath.Join(dir, fmt.Sprint("f", i))
		if err := os.WriteFile(path, c.b, 0o600); err != nil {
			t.Fatal(err)
		}
		tb := newTable(t, 1000)
		tb.Allow(at(0), []byte("mine"))
		_, err := Load(path, tb, at(c.now), at(c.now), c.lim)
		if !errors.Is(err, c.want) || !errors.Is(err, ErrIgnored) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
		if Reason(err) != c.want.Error() {
			t.Errorf("%s: reason %q, want %q", c.name, Reason(err), c.want)
		}
		if n := tb.Stats().Tags; n != 1 {
			t.Errorf("%s: the table has %d tags after an ignored file, want its own 1", c.name, n)
		}
	}
	// The good file itself loads.
	path := filepath.Join(dir, "good")
	os.WriteFile(path, good, 0o600)
	// tag0 had 3 tokens, full a second later: 19 adopted.
	if info, err := Load(path, newTable(t, 1000), at(1), at(1), lim); err != nil || info.Tags != 20 || info.Adopted != 19 {
		t.Fatalf("good file: %+v, %v", info, err)
	}
}

func TestLoadMissingAndNotRegular(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "none"), newTable(t, 10), at(0), at(0), lim); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want ErrNotExist", err)
	}
	if _, err := Load(dir, newTable(t, 10), at(0), at(0), lim); !errors.Is(err, ErrIgnored) {
		t.Errorf("a directory: %v, want ignored", err)
	}
}

func TestSaveReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	tb := newTable(t, 10)
	tb.Spend(at(0), "a", 3)
	if _, err := Save(path, tb, at(0), at(0)); err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(path)
	// A save into a directory that does not exist fails and leaves the old file.
	if _, err := Save(filepath.Join(dir, "no", "state"), tb, at(0), at(0)); err == nil {
		t.Fatal("save into a missing directory succeeded")
	}
	tb.Spend(at(0), "b", 3)
	if _, err := Save(path, tb, at(0), at(0)); err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(path)
	if len(second) <= len(first) {
		t.Errorf("second save (%d bytes) not larger than the first (%d)", len(second), len(first))
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want the state file only", len(entries))
	}
}

func TestEmptyTableSavesAnEmptyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	info, err := Save(path, newTable(t, 10), at(0), at(0))
	if err != nil || info.Tags != 0 || info.Bytes != headerLen+crcLen {
		t.Fatalf("%+v, %v", info, err)
	}
	if info, err := Load(path, newTable(t, 10), at(0), at(0), lim); err != nil || info.Tags != 0 {
		t.Fatalf("%+v, %v", info, err)
	}
}

// TestStatedLimitsRoundTrip: a tag under a limit its callers stated
// comes back under that limit, and a version 1 file (no limits) is
// still read.
func TestStatedLimitsRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	tb := newTable(t, 1000)
	leaky := bucket.Quota{Algorithm: bucket.Leaky, Burst: 3, Rate: 0.05}
	window := bucket.Quota{Algorithm: bucket.Window, Burst: 5, Period: time.Hour}
	for range 3 {
		tb.AllowQuota(at(0), []byte("api_k1"), bucket.Request{Quota: leaky, Hits: 1})
	}
	tb.AllowQuota(at(0), []byte("api_k2"), bucket.Request{Quota: window, Hits: 2})
	tb.Allow(at(0), []byte("plain"))
	if _, err := Save(path, tb, at(1), at(1)); err != nil {
		t.Fatal(err)
	}
	back := newTable(t, 1000)
	if _, err := Load(path, back, at(2), at(2), lim); err != nil {
		t.Fatal(err)
	}
	if v, _ := back.AllowQuota(at(2), []byte("api_k1"), bucket.Request{Quota: leaky}); v.Allowed || v.Policy.Burst != 3 {
		t.Fatalf("api_k1 after the restart: %+v, want empty under burst 3", v)
	}
	if back.Allow(at(2), []byte("api_k1")) {
		t.Fatal("a plain query served api_k1 past its stated limit after the restart")
	}
	if st, err := back.Peek(at(2), "api_k2"); err != nil || st.Tokens != 3 || st.Policy.Burst != 5 {
		t.Fatalf("api_k2 after the restart: %+v %v, want 3 tokens of 5", st, err)
	}
	// The same file as version 1 wrote it: no limit bytes.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var e Encoder
	e.Reset()
	_, err = Decode(b, at(2), lim, func(_ Header, ls []bucket.Level) {
		for _, l := range ls {
			l.Quota = bucket.Quota{}
			e.Add([]bucket.Level{l})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	v1 := e.Finish(at(1), 0)
	// Drop each record's limit byte (0 for all now) and say version 1.
	body := v1[headerLen : len(v1)-crcLen]
	var old []byte
	for len(body) > 0 {
		kl, w := binary.Uvarint(body)
		n := w + int(kl) + levelLen
		old = append(old, body[:n]...)
		body = body[n+1:]
	}
	f := append([]byte(nil), v1[:headerLen]...)
	binary.BigEndian.PutUint16(f[4:], 1)
	binary.BigEndian.PutUint64(f[32:], uint64(len(old)))
	f = append(f, old...)
	f = binary.BigEndian.AppendUint32(f, crc32.Checksum(f, crc32.MakeTable(crc32.Castagnoli)))
	h, err := Decode(f, at(2), lim, func(Header, []bucket.Level) {})
	if err != nil || h.Version != 1 || h.Tags != 2 { // plain is full again: not saved
		t.Fatalf("version 1 file: %+v %v, want 2 tags", h, err)
	}
}
