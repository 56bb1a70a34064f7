package hapeers

import (
	"bytes"
	"encoding/hex"
	"math"
	"net/netip"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// This file maps HAProxy's entries to the table: each entry's counter
// increase becomes hits of its tag, charged, and the tag's verdict
// becomes the entry's flag, pushed back to every HAProxy connected.

// Table is what the book asks of dthrottled's table: a charge of hits,
// into debt if need be, reported to the peers (decide.Charger), and the
// verdict of the next request without spending (decide.Checker's Check).
// *bucket.Table is one. Implementations must be safe for concurrent use
// and must not retain tag.
type Table interface {
	Charge(now time.Time, tag []byte, n uint32)
	Check(now time.Time, tag []byte, n int) bucket.Verdict
}

// maxSources is how many HAProxy processes an entry remembers the counter
// of: two while a reload runs both the old and the new, more for a few
// reloads in quick succession.
const maxSources = 4

// sourceCount is the counter an HAProxy process last sent for an entry.
type sourceCount struct {
	source uint64
	count  uint64
}

// entry is one key of one table as HAProxy sent it.
type entry struct {
	table  int    // index into the book's tables
	key    string // the key's bytes as HAProxy sends them
	tag    string // the tag it is charged to
	seen   time.Time
	flag   uint32 // the gpt0 HAProxy holds, as last pushed: 0 served, else refused until this Unix second
	counts []sourceCount
	pos    int // in book.list
}

// entryKey finds an entry.
type entryKey struct {
	table int
	key   string
}

// tableDef is what the book knows of one configured table.
type tableDef struct {
	name string // as configured, without a leading "/"
	// def is HAProxy's definition, for the key of dthrottled's own; nil
	// until one arrives.
	def *Definition
	// expire is HAProxy's lifetime of an entry, in ms; 0 without.
	expire uint64
}

// book holds every entry HAProxy sent, bounded by maxKeys, and the
// connections that flags are pushed to. It is safe for concurrent use.
type book struct {
	table   Table
	prefix  string
	counter int // the data type counted
	maxKeys int

	mu       sync.Mutex
	tables   []tableDef
	entries  map[entryKey]*entry
	list     []*entry // the same entries, for the checks' rounds
	next     int      // where the next round of checks starts in list
	sessions map[*session]struct{}
	stats    *counters
}

// newBook returns an empty book.
func newBook(t Table, cfg Config, c *counters) *book {
	b := &book{table: t, prefix: cfg.Prefix, counter: counterType(cfg.Counter), maxKeys: cfg.MaxKeys,
		entries: make(map[entryKey]*entry), sessions: make(map[*session]struct{}), stats: c}
	for _, name := range cfg.Tables {
		b.tables = append(b.tables, tableDef{name: trimSlash(name)})
	}
	return b
}

func trimSlash(s string) string {
	if len(s) > 0 && s[0] == '/' {
		return s[1:]
	}
	return s
}

// counterType is the data type of a counter's name.
func counterType(name string) int {
	switch name {
	case "gpc1":
		return dtGPC1
	case "http_req_cnt":
		return dtHTTPReqCnt
	case "gpc":
		return dtGPC
	}
	return dtGPC0
}

// Counters names the counters Config.Counter may name.
var Counters = []string{"gpc0", "gpc1", "gpc", "http_req_cnt"}

// define takes HAProxy's definition of a table: its index among the
// configured tables, or -1 (counted and logged) when it is not one of
// them, or when it lacks the counter or the flag.
func (b *book) define(d Definition) (int, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range b.tables {
		if b.tables[i].name != trimSlash(d.Name) {
			continue
		}
		switch {
		case !d.has(b.counter):
			return -1, "the table does not store the counter"
		case !d.has(dtGPT0):
			return -1, "the table does not store gpt0"
		case d.KeyType < KeySInt || d.KeyType > KeyBinary || d.KeyType == 3:
			return -1, "unknown key type"
		}
		cp := d
		cp.ID = uint64(i + 1)
		cp.Data = 1 << dtGPT0
		cp.Expire = 0
		b.tables[i].def, b.tables[i].expire = &cp, d.Expire
		return i, ""
	}
	return -1, "not a table of haproxy.tables"
}

// definition returns dthrottled's own definition of table i, nil until
// HAProxy defined it.
func (b *book) definition(i int) *Definition {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tables[i].def
}

// maxExpire is the longest lifetime of an entry among the tables HAProxy
// defined, in ms; 0 when none has one.
func (b *book) maxExpire() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ms uint64
	for _, t := range b.tables {
		ms = max(ms, t.expire)
	}
	return ms
}

// tagOf returns the tag of key in a table of key type kt, false when the
// key is no tag (empty, or holding a newline or a NUL).
func (b *book) tagOf(kt uint64, key []byte) (string, bool) {
	var s string
	switch kt {
	case KeyString:
		if len(key) == 0 || bytes.ContainsAny(key, "\n\r\x00") {
			return "", false
		}
		s = string(key)
	case KeyIPv4:
		s = netip.AddrFrom4([4]byte(key)).String()
	case KeyIPv6:
		s = netip.AddrFrom16([16]byte(key)).Unmap().String()
	case KeySInt:
		s = strconv.FormatInt(int64(int32(uint32(key[0])<<24|uint32(key[1])<<16|uint32(key[2])<<8|uint32(key[3]))), 10)
	default:
		s = hex.EncodeToString(key)
	}
	return b.prefix + s, true
}

// apply takes an update of table ti (defined as d) from source at now:
// the counter's increase is charged to the tag, and the flag is pushed
// where it changed.
func (b *book) apply(now time.Time, source uint64, ti int, d *Definition, u *Update) {
	count := u.Values[b.counter]
	b.mu.Lock()
	e := b.entries[entryKey{ti, string(u.Key)}]
	var tag string
	if e != nil {
		tag = e.tag
	} else {
		b.mu.Unlock()
		if (d.KeyType == KeyIPv4 && len(u.Key) != 4) || (d.KeyType == KeyIPv6 && len(u.Key) != 16) || (d.KeyType == KeySInt && len(u.Key) != 4) {
			b.stats.badKeys.Add(1)
			return
		}
		var ok bool
		if tag, ok = b.tagOf(d.KeyType, u.Key); !ok {
			b.stats.badKeys.Add(1)
			return
		}
		b.mu.Lock()
		if e = b.entries[entryKey{ti, string(u.Key)}]; e == nil {
			e = b.insert(now, ti, u.Key, tag)
		}
	}
	var inc uint64
	known := false
	if e != nil {
		e.seen = now
		for i := range e.counts {
			if e.counts[i].source == source {
				known = true
				if count >= e.counts[i].count {
					inc = count - e.counts[i].count
				} else {
					inc = count // HAProxy forgot the entry and began again
				}
				e.counts[i].count = count
			}
		}
		if !known {
			if len(e.counts) == maxSources {
				e.counts = e.counts[1:]
			}
			e.counts = append(e.counts, sourceCount{source, count})
		}
	}
	b.mu.Unlock()
	tb := bytesOf(tag)
	if !known {
		// An entry not seen from this process: its count began in
		// HAProxy before this book knew it (dthrottled restarted, the
		// entry was forgotten, or HAProxy just made it). At most a burst
		// of it is charged (docs/integrations/haproxy.md, "The bound").
		inc = min(count, uint64(b.table.Check(now, tb, 1).Policy.Burst))
		b.stats.firstSeen.Add(1)
	}
	if inc > 0 {
		b.table.Charge(now, tb, uint32(min(inc, math.MaxUint32)))
		b.stats.hits.Add(inc)
	}
	if e != nil {
		b.check(now, e)
	}
}

// insert adds an entry for key of table ti, or returns nil when the book
// is full (counted): that key's updates are then charged as first seen.
// b.mu is held.
func (b *book) insert(now time.Time, ti int, key []byte, tag string) *entry {
	if len(b.entries) >= b.maxKeys {
		b.stats.untracked.Add(1)
		return nil
	}
	e := &entry{table: ti, key: string(key), tag: tag, seen: now, pos: len(b.list)}
	b.entries[entryKey{ti, e.key}] = e
	b.list = append(b.list, e)
	return e
}

// remove drops e. b.mu is held.
func (b *book) remove(e *entry) {
	delete(b.entries, entryKey{e.table, e.key})
	last := b.list[len(b.list)-1]
	b.list[e.pos] = last
	last.pos = e.pos
	b.list = b.list[:len(b.list)-1]
}

// maxWait bounds the time a flag says a token is back in.
const maxWait = 24 * time.Hour

// flagOf is the gpt0 of a verdict at now: 0 when the next request is
// served, else the Unix second, rounded up, at which it would be.
func flagOf(now time.Time, v bucket.Verdict) uint32 {
	if v.Allowed {
		return 0
	}
	until := now.Add(min(max(v.Wait, 0), maxWait))
	sec := until.Unix()
	if until.Nanosecond() > 0 {
		sec++
	}
	return uint32(max(sec, now.Unix()+1))
}

// check asks the table whether e's tag would be served now, and pushes
// the flag to every connection where it changed.
func (b *book) check(now time.Time, e *entry) {
	// Under the lock, so that a verdict taken earlier never replaces a
	// later one.
	b.mu.Lock()
	flag := flagOf(now, b.table.Check(now, bytesOf(e.tag), 1))
	if flag == e.flag {
		b.mu.Unlock()
		return
	}
	e.flag = flag
	b.pushLocked(e)
	b.mu.Unlock()
}

// pushLocked queues e's flag on every connection. b.mu is held.
func (b *book) pushLocked(e *entry) {
	b.stats.pushes.Add(1)
	for s := range b.sessions {
		s.queue(e.table, e.key, e.flag)
	}
}

// round checks up to budget entries, starting where the last round ended,
// and forgets those HAProxy has not sent within idle. It returns how many
// it checked.
func (b *book) round(now time.Time, budget int, idle time.Duration) int {
	b.mu.Lock()
	budget = min(budget, len(b.list)) // each entry at most once a round
	batch := make([]*entry, 0, budget)
	for range budget {
		if len(b.list) == 0 {
			break
		}
		if b.next >= len(b.list) {
			b.next = 0
		}
		e := b.list[b.next]
		if now.Sub(e.seen) > idle {
			b.remove(e) // the entry at b.next is now another one
			continue
		}
		batch = append(batch, e)
		b.next++
	}
	b.mu.Unlock()
	for _, e := range batch {
		b.check(now, e)
	}
	return len(batch)
}

// flagged returns the entries of table ti whose flag is set, for a
// resync: their keys and flags.
func (b *book) flagged(ti int) ([]string, []uint32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var keys []string
	var flags []uint32
	for _, e := range b.list {
		if e.table == ti && e.flag != 0 {
			keys, flags = append(keys, e.key), append(flags, e.flag)
		}
	}
	return keys, flags
}

// join adds s to the connections flags are pushed to; leave removes it.
func (b *book) join(s *session) {
	b.mu.Lock()
	b.sessions[s] = struct{}{}
	b.mu.Unlock()
}

func (b *book) leave(s *session) {
	b.mu.Lock()
	delete(b.sessions, s)
	b.mu.Unlock()
}

// size is the number of entries held.
func (b *book) size() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.list)
}

// bytesOf is s's bytes, not copied: for calls that do not retain them.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
