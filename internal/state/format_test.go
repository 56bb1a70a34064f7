package state

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// TestMaxBytesBoundsAFullTable: a table at its max_tags of the longest
// keys it keeps writes a file of exactly MaxBytes.
func TestMaxBytesBoundsAFullTable(t *testing.T) {
	const maxTags, maxTagBytes = 50, 64
	tb, err := bucket.New(bucket.Config{Default: bucket.Policy{Rate: 1, Burst: 4}, MaxTags: maxTags, MaxTagBytes: maxTagBytes})
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxTags {
		// Longer than max_tag_bytes: kept as a digest key, the longest.
		// Under a stated window: the longest limit a record carries.
		tb.AllowQuota(at(0), []byte(strings.Repeat("x", 100)+string(rune('A'+i))),
			bucket.Request{Quota: bucket.Quota{Algorithm: bucket.Window, Burst: 4, Calendar: bucket.Day}, Hits: 1})
	}
	info, err := Save(filepath.Join(t.TempDir(), "state"), tb, at(0), at(0))
	if err != nil {
		t.Fatal(err)
	}
	want := MaxBytes(maxTags, bucket.MaxKeyBytes(maxTagBytes))
	if info.Tags != maxTags || info.Bytes != want {
		t.Fatalf("saved %d tags in %d bytes, want %d tags in MaxBytes = %d", info.Tags, info.Bytes, maxTags, want)
	}
}
