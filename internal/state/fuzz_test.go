package state

import (
	"errors"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// FuzzDecode holds the loader to its promise: whatever the file holds,
// Decode returns a reason or the records the header announces, and never
// panics.
func FuzzDecode(f *testing.F) {
	good := saved(&testing.T{}, 0)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte("DTST\x00\x01"))
	f.Add([]byte{})
	lim := Limits{MaxAge: time.Hour, MaxTags: 1 << 16, MaxBytes: 1 << 20}
	f.Fuzz(func(t *testing.T, b []byte) {
		n := 0
		h, err := Decode(b, at(1), lim, func(_ Header, ls []bucket.Level) {
			for _, l := range ls {
				if len(l.Key) == 0 || l.Tokens != l.Tokens {
					t.Fatalf("level %q=%v handed over", l.Key, l.Tokens)
				}
			}
			n += len(ls)
		})
		if err != nil {
			if !errors.Is(err, ErrIgnored) || Reason(err) == "" {
				t.Fatalf("error without a reason: %v", err)
			}
			if n != 0 {
				t.Fatalf("%d records handed over from an ignored file", n)
			}
			return
		}
		if n != h.Tags {
			t.Fatalf("%d records handed over, the header says %d", n, h.Tags)
		}
	})
}
