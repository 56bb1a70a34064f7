// Package state owns the on-disk snapshot of the tag table: the state file
// a daemon writes on a clean stop and reads back on start, so that a
// restart (a deploy, a reboot, a whole cluster at once) does not hand every
// throttled client a fresh burst.
//
// The file holds the level of every tag whose bucket was below its burst
// (see bucket.Level) and the wall-clock time it was saved at. It is
// written atomically (a temporary file in the same directory, fsync,
// rename, fsync of the directory) and read back only if it is whole,
// of this version, not from the future and younger than the caller's
// limit; otherwise it is ignored, with the reason, and the table starts
// empty.
//
// # Format, version 2
//
// Integers are big-endian.
//
//	offset  size  field
//	0       4     magic "DTST"
//	4       2     version, 2 (1 is read too)
//	6       2     flags, 0; reserved
//	8       8     saved at, wall clock, Unix nanoseconds
//	16      8     fingerprint of the saver's policies
//	24      8     number of records
//	32      8     n, the length of the records in bytes
//	40      n     records
//	40+n    4     CRC-32C (Castagnoli) of bytes [0, 40+n)
//
// A record is the tag's key length as a uvarint (1 to 65537), the key's
// bytes, then the bucket's tokens at the saved instant, an IEEE 754
// float64 (below the policy's burst; negative is debt), then the limit
// the bucket is under (version 2; version 1 has none: every record is
// under its policy):
//
//	size  field
//	1     0: the tag's policy, nothing follows; 1: a leaky bucket its
//	      callers stated; 2: a window its callers stated
//	4     burst, or hits per window (kinds 1 and 2)
//	8     kind 1: rate, tokens a second, float64; kind 2: the window's
//	      length in nanoseconds, int64
//	1     kind 2: calendar unit (0 none, 1 minute ... 6 year)
//
// A stated limit out of range (bucket.Quota.Check) makes the file corrupt.
package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// Version is the format version Encode writes. Decode accepts it and
// version 1, whose records carry no limit.
const Version = 2

const (
	magic     = "DTST"
	headerLen = 40
	crcLen    = 4
	// maxKeyLen is the longest key a table keeps: a digest key at the
	// highest max_tag_bytes.
	maxKeyLen = 65537
	levelLen  = 8
	// quotaLen is the most bytes a record's limit takes (kind 2).
	quotaLen = 1 + 4 + 8 + 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is what a state file says about itself.
type Header struct {
	Version     int
	SavedAt     time.Time // wall clock
	Fingerprint uint64    // of the saver's policies
	Tags        int
}

// MaxBytes is the longest file a table of at most maxTags tags, whose
// keys are at most maxKey bytes (bucket.MaxKeyBytes), writes: a bound for
// Limits.MaxBytes.
func MaxBytes(maxTags, maxKey int) int64 {
	record := int64(binary.PutUvarint(make([]byte, binary.MaxVarintLen64), uint64(maxKey)) + maxKey + levelLen + quotaLen)
	return headerLen + int64(maxTags)*record + crcLen
}

// Limits bound what Decode and Load accept. The zero value accepts
// nothing: set every field.
type Limits struct {
	MaxAge   time.Duration // a file saved longer ago is stale
	MaxTags  int           // a file with more records is oversized
	MaxBytes int64         // a longer file is oversized (not even read)
}

// Reasons a state file is ignored. Every error Decode and Load return
// for a file that exists matches ErrIgnored and exactly one of these.
var (
	ErrIgnored   = errors.New("state file ignored")
	ErrTruncated = reason("truncated")
	ErrCorrupt   = reason("corrupt")
	ErrVersion   = reason("version")
	ErrFuture    = reason("future")
	ErrStale     = reason("stale")
	ErrOversized = reason("oversized")
)

// Reasons lists every reason a file is ignored, for metrics labels.
var Reasons = []error{ErrTruncated, ErrCorrupt, ErrVersion, ErrFuture, ErrStale, ErrOversized}

// reason is an error that is also ErrIgnored.
type reason string

func (r reason) Error() string        { return string(r) }
func (r reason) Is(target error) bool { return target == ErrIgnored }

// Reason returns the short name of why err made a file be ignored
// ("truncated", "corrupt", ...), or "" for any other error.
func Reason(err error) string {
	for _, r := range Reasons {
		if errors.Is(err, r) {
			return r.Error()
		}
	}
	return ""
}

func ignored(r error, format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{r}, args...)...)
}

// Encoder builds a state file in memory. The zero value is ready to use;
// not safe for concurrent use.
type Encoder struct {
	buf  []byte
	tags int
}

// Reset starts a new file, keeping the buffer.
func (e *Encoder) Reset() {
	e.buf = append(e.buf[:0], make([]byte, headerLen)...)
	e.tags = 0
}

// Add appends levels as records. Levels that are full or not numbers, and
// keys that are empty or too long, are skipped.
func (e *Encoder) Add(levels []bucket.Level) {
	if len(e.buf) < headerLen {
		e.Reset()
	}
	for _, l := range levels {
		if len(l.Key) == 0 || len(l.Key) > maxKeyLen || math.IsNaN(l.Tokens) {
			continue
		}
		e.buf = binary.AppendUvarint(e.buf, uint64(len(l.Key)))
		e.buf = append(e.buf, l.Key...)
		e.buf = binary.BigEndian.AppendUint64(e.buf, math.Float64bits(l.Tokens))
		e.buf = appendQuota(e.buf, l.Quota)
		e.tags++
	}
}

// Finish writes the header and the checksum and returns the whole file,
// which aliases the encoder's buffer until the next Reset.
func (e *Encoder) Finish(savedAt time.Time, fingerprint uint64) []byte {
	if len(e.buf) < headerLen {
		e.Reset()
	}
	b := e.buf
	copy(b, magic)
	binary.BigEndian.PutUint16(b[4:], Version)
	binary.BigEndian.PutUint16(b[6:], 0)
	binary.BigEndian.PutUint64(b[8:], uint64(savedAt.UnixNano()))
	binary.BigEndian.PutUint64(b[16:], fingerprint)
	binary.BigEndian.PutUint64(b[24:], uint64(e.tags))
	binary.BigEndian.PutUint64(b[32:], uint64(len(b)-headerLen))
	e.buf = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	return e.buf
}

// Decode checks a whole state file, b, against lim at wall-clock time
// now, and only if it is sound calls fn with its header and its records,
// in batches; the levels' keys alias b. An unsound file is an error matching ErrIgnored
// and one of the reasons; fn is then never called. Decode never panics,
// whatever b holds.
func Decode(b []byte, now time.Time, lim Limits, fn func(Header, []bucket.Level)) (Header, error) {
	var h Header
	if int64(len(b)) > lim.MaxBytes {
		return h, ignored(ErrOversized, "%d bytes, at most %d", len(b), lim.MaxBytes)
	}
	if len(b) < len(magic) || string(b[:len(magic)]) != magic {
		if len(b) < len(magic) && string(b) == magic[:len(b)] {
			return h, ignored(ErrTruncated, "%d bytes", len(b))
		}
		return h, ignored(ErrCorrupt, "not a dthrottle state file")
	}
	if len(b) < 6 {
		return h, ignored(ErrTruncated, "%d bytes", len(b))
	}
	v := binary.BigEndian.Uint16(b[4:])
	if v != Version && v != 1 {
		return h, ignored(ErrVersion, "version %d, this daemon reads 1 and %d", v, Version)
	}
	if len(b) < headerLen+crcLen {
		return h, ignored(ErrTruncated, "%d bytes", len(b))
	}
	n := binary.BigEndian.Uint64(b[32:])
	if n > uint64(len(b)) || uint64(len(b)) < headerLen+n+crcLen {
		return h, ignored(ErrTruncated, "%d bytes, the header announces %d", len(b), headerLen+n+crcLen)
	}
	end := headerLen + int(n)
	if len(b) > end+crcLen {
		return h, ignored(ErrCorrupt, "%d bytes after the checksum", len(b)-end-crcLen)
	}
	if crc32.Checksum(b[:end], castagnoli) != binary.BigEndian.Uint32(b[end:]) {
		return h, ignored(ErrCorrupt, "checksum mismatch")
	}
	h.Version = int(v)
	h.SavedAt = time.Unix(0, int64(binary.BigEndian.Uint64(b[8:])))
	h.Fingerprint = binary.BigEndian.Uint64(b[16:])
	count := binary.BigEndian.Uint64(b[24:])
	if count > uint64(lim.MaxTags) {
		return h, ignored(ErrOversized, "%d tags, at most %d", count, lim.MaxTags)
	}
	h.Tags = int(count)
	if h.SavedAt.After(now) {
		return h, ignored(ErrFuture, "saved at %s, after now (%s)", h.SavedAt.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	}
	if age := now.Sub(h.SavedAt); age > lim.MaxAge {
		return h, ignored(ErrStale, "saved %s ago, more than %s", age.Round(time.Millisecond), lim.MaxAge)
	}
	// Check every record before handing any over.
	if err := walk(b[headerLen:end], h.Tags, v >= 2, nil, nil); err != nil {
		return h, err
	}
	var batch [256]bucket.Level
	return h, walk(b[headerLen:end], h.Tags, v >= 2, batch[:0], func(ls []bucket.Level) { fn(h, ls) })
}

// walk parses the records in body, which must be exactly count of them,
// each with its limit when limits is set, handing them to fn in batches
// when fn is not nil.
func walk(body []byte, count int, limits bool, batch []bucket.Level, fn func([]bucket.Level)) error {
	for i := 0; i < count; i++ {
		kl, w := binary.Uvarint(body)
		if w <= 0 || kl == 0 || kl > maxKeyLen || uint64(len(body)-w) < kl+levelLen {
			return ignored(ErrCorrupt, "record %d of %d is malformed", i+1, count)
		}
		body = body[w:]
		key := body[:kl:kl]
		tokens := math.Float64frombits(binary.BigEndian.Uint64(body[kl:]))
		body = body[kl+levelLen:]
		if math.IsNaN(tokens) {
			return ignored(ErrCorrupt, "record %d of %d is not a number", i+1, count)
		}
		var q bucket.Quota
		if limits {
			var ok bool
			if q, body, ok = readQuota(body); !ok {
				return ignored(ErrCorrupt, "record %d of %d has a malformed limit", i+1, count)
			}
		}
		if fn != nil {
			if batch = append(batch, bucket.Level{Key: key, Tokens: tokens, Quota: q}); len(batch) == cap(batch) {
				fn(batch)
				batch = batch[:0]
			}
		}
	}
	if len(body) != 0 {
		return ignored(ErrCorrupt, "%d bytes after the last record", len(body))
	}
	if fn != nil && len(batch) > 0 {
		fn(batch)
	}
	return nil
}

// The kinds of a record's limit.
const (
	limitPolicy = 0
	limitLeaky  = 1
	limitWindow = 2
)

// appendQuota appends a record's limit: q, or the policy's for the zero
// Quota.
func appendQuota(b []byte, q bucket.Quota) []byte {
	switch {
	case q.Burst == 0:
		return append(b, limitPolicy)
	case q.Algorithm == bucket.Window:
		b = append(b, limitWindow)
		b = binary.BigEndian.AppendUint32(b, uint32(q.Burst))
		b = binary.BigEndian.AppendUint64(b, uint64(q.Period))
		return append(b, byte(q.Calendar))
	default:
		b = append(b, limitLeaky)
		b = binary.BigEndian.AppendUint32(b, uint32(q.Burst))
		return binary.BigEndian.AppendUint64(b, math.Float64bits(q.Rate))
	}
}

// readQuota reads a record's limit from the front of b, and returns the
// rest; false when it is malformed or out of range.
func readQuota(b []byte) (bucket.Quota, []byte, bool) {
	var q bucket.Quota
	if len(b) < 1 {
		return q, b, false
	}
	kind, b := b[0], b[1:]
	switch kind {
	case limitPolicy:
		return q, b, true
	case limitLeaky:
		if len(b) < 12 {
			return q, b, false
		}
		q = bucket.Quota{Algorithm: bucket.Leaky, Burst: int(binary.BigEndian.Uint32(b)), Rate: math.Float64frombits(binary.BigEndian.Uint64(b[4:]))}
		b = b[12:]
	case limitWindow:
		if len(b) < 13 {
			return q, b, false
		}
		q = bucket.Quota{Algorithm: bucket.Window, Burst: int(binary.BigEndian.Uint32(b)), Period: time.Duration(binary.BigEndian.Uint64(b[4:])), Calendar: bucket.Calendar(b[12])}
		b = b[13:]
	default:
		return q, b, false
	}
	return q, b, q.Check() == nil
}
