package logtest

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is a log's text, written by a logger (slog.NewTextHandler(b,
// nil)) from any goroutine and read by the test. The zero Buffer is
// ready to use; it is safe for concurrent use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Lines returns the lines written so far that contain every one of
// parts (every line, for none).
func (b *Buffer) Lines(parts ...string) []string {
	var out []string
next:
	for _, line := range strings.Split(b.String(), "\n") {
		if line == "" {
			continue
		}
		for _, p := range parts {
			if !strings.Contains(line, p) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
}
