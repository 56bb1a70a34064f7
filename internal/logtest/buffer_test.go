package logtest

import (
	"log/slog"
	"sync"
	"testing"
)

// TestBufferLines: a text logger's lines, written from several
// goroutines at once, are each whole, and Lines picks those holding every
// part asked for.
func TestBufferLines(t *testing.T) {
	var b Buffer
	log := slog.New(slog.NewTextHandler(&b, nil))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { log.Info("peer joined", "node", i) })
	}
	wg.Wait()
	log.Warn("peer went silent", "node", 3)
	if got := len(b.Lines()); got != 9 {
		t.Fatalf("%d lines, want 9:\n%s", got, b.String())
	}
	if got := len(b.Lines("peer joined")); got != 8 {
		t.Errorf("%d lines of peers joining, want 8", got)
	}
	if got := b.Lines("node=3"); len(got) != 2 || len(b.Lines("silent", "node=3")) != 1 {
		t.Errorf("lines of node 3: %q, want its joining and its silence", got)
	}
	if got := b.Lines("silent", "node=4"); len(got) != 0 {
		t.Errorf("lines of node 4 going silent: %q, want none", got)
	}
}
