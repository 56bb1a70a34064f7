package daemon

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dthrottle/dthrottle/internal/config"
)

// runOnce starts a daemon on cfg, hands it to f, and stops it cleanly.
func runOnce(t *testing.T, cfg config.Config, sock string, f func(r *running)) StateStats {
	t.Helper()
	ev := newEvents()
	d, err := New(Options{Config: cfg, OnEvent: ev.hook})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Daemon: d, ev: ev, sock: sock, done: make(chan error, 1), stop: cancel}
	go func() { r.done <- d.Run(ctx) }()
	ev.wait(t, Started, 0)
	f(r)
	cancel()
	<-r.done
	if err := d.Close(time.Second); err != nil {
		t.Fatal(err)
	}
	return d.StateStats()
}

func stateConfig(t *testing.T) (config.Config, string) {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "d.sock")
	_, cfg := writeConfig(t, dir, sock, base+"[state]\nfile = \""+filepath.Join(dir, "state")+"\"\n")
	return cfg, sock
}

func TestStateFileKeepsSpentTagsAcrossARestart(t *testing.T) {
	cfg, sock := stateConfig(t)
	st := runOnce(t, cfg, sock, func(r *running) {
		if got, want := r.ask(t, "hot", "hot", "hot", "hot", "warm"), "OK OK OK NO OK"; got != want {
			t.Fatalf("before the restart: %q, want %q", got, want)
		}
		if _, err := os.Stat(cfg.State.File); !os.IsNotExist(err) {
			t.Fatalf("state file written before the stop: %v", err)
		}
	})
	if !st.Saved || st.Save.Tags != 2 {
		t.Fatalf("save: %+v, want 2 tags saved", st)
	}
	st = runOnce(t, cfg, sock, func(r *running) {
		// hot was spent before the restart: still refused; warm has the 2
		// tokens it had left; a new tag gets a full burst.
		if got, want := r.ask(t, "hot", "warm", "warm", "warm", "new", "new", "new", "new"), "NO OK OK NO OK OK OK NO"; got != want {
			t.Fatalf("after the restart: %q, want %q", got, want)
		}
	})
	if !st.Loaded || st.Load.Tags != 2 || st.Load.Adopted != 2 || st.Ignored != "" {
		t.Fatalf("load: %+v", st)
	}
}

func TestBadStateFileIgnored(t *testing.T) {
	for name, content := range map[string]string{
		"corrupt":   "not a state file, not at all, not at all, not at all, not at all",
		"truncated": "DTST\x00\x01\x00",
		"version":   "DTST\x00\x09",
	} {
		cfg, sock := stateConfig(t)
		if err := os.WriteFile(cfg.State.File, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		st := runOnce(t, cfg, sock, func(r *running) {
			if got, want := r.ask(t, "a", "a", "a", "a"), "OK OK OK NO"; got != want {
				t.Errorf("%s: replies %q, want %q", name, got, want)
			}
		})
		if st.Loaded || st.Ignored != name {
			t.Errorf("%s: %+v, want ignored as %s", name, st, name)
		}
		// The stop wrote a sound file over it.
		if !st.Saved {
			t.Errorf("%s: not saved on stop: %+v", name, st)
		}
	}
}

func TestStateLimits(t *testing.T) {
	cfg := config.Default()
	cfg.Limit.Rate, cfg.Limit.Burst = 1, 10 // 10s to refill
	cfg.Policy = []config.Policy{
		{Name: "login", Prefix: "login:", Rate: 0.2, Burst: 5}, // 25s
		{Name: "ok", Prefix: "ok:", Action: config.ActionAllow},
	}
	lim := stateLimits(cfg)
	if lim.MaxAge != 25*time.Second || lim.MaxTags != cfg.Limit.MaxTags || lim.MaxBytes < int64(cfg.Limit.MaxTags)*int64(cfg.Listen.MaxTagBytes) {
		t.Fatalf("%+v", lim)
	}
}
