package daemon

import (
	"errors"
	"os"
	"time"

	"github.com/dthrottle/dthrottle/internal/bucket"
	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/state"
)

// This file owns the state file: the table read back on start and written
// on a clean stop (state.file).

// StateStats are what the state file did in this process: the load on
// start and the save on stop.
type StateStats = state.Stats

// stateLimits bounds the state file a config accepts: no older than the
// longest refill time of its limit policies (a bucket emptied then is full
// again by now), no more tags than max_tags, and no longer than max_tags
// records of the longest key would be.
func stateLimits(cfg config.Config) state.Limits {
	tc := tableConfig(cfg)
	age := tc.Default.Refill()
	for _, p := range tc.Policies {
		age = max(age, p.Refill())
	}
	return state.Limits{MaxAge: age, MaxTags: cfg.Limit.MaxTags,
		MaxBytes: state.MaxBytes(cfg.Limit.MaxTags, bucket.MaxKeyBytes(cfg.Listen.MaxTagBytes))}
}

// loadState reads the state file back into the table, if one is
// configured and sound; a missing or unsound file is logged, never fatal.
func (d *Daemon) loadState(cfg config.Config) {
	path := cfg.State.File
	if path == "" {
		return
	}
	info, err := state.Load(path, d.table, d.now(), time.Now(), stateLimits(cfg))
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	switch {
	case errors.Is(err, os.ErrNotExist):
		d.log.Info("state: no state file: starting empty", "file", path)
	case errors.Is(err, state.ErrIgnored):
		d.state.Ignored = state.Reason(err)
		d.log.Warn("state: state file ignored: starting empty", "file", path, "reason", d.state.Ignored, "err", err,
			"bytes", info.Bytes, "age", info.Age)
	case err != nil:
		d.state.Ignored = "unreadable"
		d.log.Warn("state: state file unreadable: starting empty", "file", path, "err", err)
	default:
		d.state.Loaded, d.state.Load = true, info
		d.log.Info("state: table read back", "file", path, "tags", info.Tags, "adopted", info.Adopted,
			"bytes", info.Bytes, "age", info.Age, "took", info.Duration)
	}
}

// saveState writes the table to the state file, if one is configured.
func (d *Daemon) saveState(cfg config.Config) {
	path := cfg.State.File
	if path == "" {
		return
	}
	info, err := state.Save(path, d.table, d.now(), time.Now())
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	if err != nil {
		d.state.SaveFailure = err.Error()
		d.log.Error("state: table not saved: the next start begins empty", "file", path, "err", err)
		return
	}
	d.state.Saved, d.state.Save = true, info
	d.log.Info("state: table saved", "file", path, "tags", info.Tags, "bytes", info.Bytes, "took", info.Duration)
}

// StateStats reports what the state file did in this process.
func (d *Daemon) StateStats() StateStats {
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	return d.state
}
