// Package logtest is a slog.Handler for tests that keeps every record, so
// that a test can say what was logged, at which level, and how often.
package logtest

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// Recorder is a slog.Handler that keeps every record it is given. The zero
// Recorder is ready to use; it is safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	records []slog.Record
}

// Logger returns a logger writing to r.
func (r *Recorder) Logger() *slog.Logger { return slog.New(r) }

// Enabled reports that every level is kept.
func (r *Recorder) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps a copy of rec.
func (r *Recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.records = append(r.records, rec.Clone())
	r.mu.Unlock()
	return nil
}

// WithAttrs returns r: the attributes given to a logger are not kept.
func (r *Recorder) WithAttrs([]slog.Attr) slog.Handler { return r }

// WithGroup returns r.
func (r *Recorder) WithGroup(string) slog.Handler { return r }

// Records returns a copy of the records kept so far, in order.
func (r *Recorder) Records() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]slog.Record(nil), r.records...)
}

// Messages returns each record kept as "LEVEL message", in order.
func (r *Recorder) Messages() []string {
	var out []string
	for _, rec := range r.Records() {
		out = append(out, rec.Level.String()+" "+rec.Message)
	}
	return out
}

// Find returns the records with message msg at level.
func (r *Recorder) Find(level slog.Level, msg string) []slog.Record {
	var out []slog.Record
	for _, rec := range r.Records() {
		if rec.Level == level && rec.Message == msg {
			out = append(out, rec)
		}
	}
	return out
}

// Count is how many records' messages start with prefix.
func (r *Recorder) Count(prefix string) int {
	n := 0
	for _, rec := range r.Records() {
		if strings.HasPrefix(rec.Message, prefix) {
			n++
		}
	}
	return n
}
