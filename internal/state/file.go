package state

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// Info is what a Save or a Load did, for the log and the metrics.
type Info struct {
	Tags     int           // records written, or read back
	Adopted  int           // Load: buckets the records lowered
	Bytes    int64         // the file's size
	Duration time.Duration // time taken
	Age      time.Duration // Load: how long before now the file was saved
}

// Stats are what a daemon's state file did in one process: the load on
// start and the save on a clean stop. The zero Stats is a file neither
// read nor written.
type Stats struct {
	Loaded      bool   // a file was read back into the table
	Ignored     string // why a file was ignored ("corrupt", "stale", ...), "" if not
	Load        Info
	Saved       bool
	Save        Info
	SaveFailure string
}

// Save writes the level at now of every tag of t whose bucket is below
// its burst to path, atomically: into a temporary file in the same
// directory, synced to disk, renamed over path, then the directory synced.
// wall is the wall-clock time recorded as the saving instant; now is the
// table's clock. A failed Save leaves any previous file at path as it was.
func Save(path string, t *bucket.Table, now, wall time.Time) (Info, error) {
	start := time.Now()
	var e Encoder
	e.Reset()
	t.Export(now, func(ls []bucket.Level) error { e.Add(ls); return nil })
	b := e.Finish(wall, t.Fingerprint())
	if err := writeAtomic(path, b); err != nil {
		return Info{}, err
	}
	return Info{Tags: e.tags, Bytes: int64(len(b)), Duration: time.Since(start)}, nil
}

// writeAtomic replaces path by a file holding b.
func writeAtomic(path string, b []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("state: creating a temporary file: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(b); err != nil {
		return fmt.Errorf("state: writing %s: %w", f.Name(), err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("state: syncing %s: %w", f.Name(), err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("state: closing %s: %w", f.Name(), err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("state: renaming to %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("state: opening %s to sync it: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("state: syncing %s: %w", dir, err)
	}
	return nil
}

// Load reads path, checks it against lim at wall-clock time wall, and
// merges its levels into t at now (the table's clock), as they were the
// file's age before: a bucket keeps the lower of its own level and the
// file's, refilled since (see bucket.Table.Merge). A missing file is an
// error matching os.ErrNotExist; a file that is not sound is an error
// matching ErrIgnored and its reason, and changes nothing in t.
func Load(path string, t *bucket.Table, now, wall time.Time, lim Limits) (Info, error) {
	start := time.Now()
	f, err := os.Open(path)
	if err != nil {
		return Info{}, fmt.Errorf("state: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Info{}, fmt.Errorf("state: %w", err)
	}
	info := Info{Bytes: st.Size()}
	if !st.Mode().IsRegular() {
		return info, ignored(ErrCorrupt, "%s is not a regular file", path)
	}
	if st.Size() > lim.MaxBytes {
		return info, ignored(ErrOversized, "%d bytes, at most %d", st.Size(), lim.MaxBytes)
	}
	// Read one byte more than the size, in case the file grew: Decode
	// then finds it oversized or its trailer misplaced.
	b := make([]byte, st.Size()+1)
	n, err := io.ReadFull(f, b)
	if err != nil && err != io.EOF && !errors.Is(err, io.ErrUnexpectedEOF) {
		return info, fmt.Errorf("state: reading %s: %w", path, err)
	}
	b = b[:n]
	info.Bytes = int64(n)
	h, err := Decode(b, wall, lim, func(h Header, ls []bucket.Level) {
		info.Adopted += t.Merge(now, wall.Sub(h.SavedAt), ls)
	})
	if !h.SavedAt.IsZero() {
		info.Age = wall.Sub(h.SavedAt)
	}
	if err != nil {
		return info, err
	}
	info.Tags = h.Tags
	info.Duration = time.Since(start)
	return info, nil
}
