package daemon

import "runtime/debug"

// Kind says what an Event reports.
type Kind int

// The kinds of Event, in the order a daemon's life produces them.
const (
	// Started: Run serves on every listener.
	Started Kind = iota + 1
	// Reloaded: a reload was applied. Keys names the changed settings
	// that need a restart and kept their running value.
	Reloaded
	// ReloadFailed: a reload was rejected; Err says why, and the running
	// config is kept.
	ReloadFailed
	// Failed: a listener failed; Run returns Err.
	Failed
	// Stopped: Close finished one stage of the stop; Stage names it.
	Stopped
)

func (k Kind) String() string {
	switch k {
	case Started:
		return "started"
	case Reloaded:
		return "reloaded"
	case ReloadFailed:
		return "reload failed"
	case Failed:
		return "failed"
	case Stopped:
		return "stopped"
	}
	return "unknown"
}

// The stages of a stop, in the order Close runs them.
const (
	StageQueries   = "queries"   // no query is accepted or left unanswered
	StageState     = "state"     // the table is saved to state.file (only when it is set)
	StageGossip    = "gossip"    // the last hits are reported
	StageListeners = "listeners" // sockets closed, the Unix socket's lock released
	StageAdmin     = "admin"     // the admin endpoint is closed
)

// Event is something a daemon did that a test (or an embedding program)
// may wait on. It is a plain value.
type Event struct {
	Kind  Kind
	Err   error    // ReloadFailed, Failed; Stopped(gossip) when the last report failed
	Keys  []string // Reloaded: settings that need a restart
	Stage string   // Stopped
}

// event hands e to the OnEvent hook.
func (d *Daemon) event(e Event) { d.onEvent(e) }

// Version is the version a build reports: set, as with -ldflags "-X
// main.version=...", or else the module's version, or "(devel)"; then the
// Go version it was built with.
func Version(set string) string {
	v := set
	info, ok := debug.ReadBuildInfo()
	if v == "" && ok && info.Main.Version != "" {
		v = info.Main.Version
	}
	if v == "" {
		v = "(devel)"
	}
	if ok {
		v += " " + info.GoVersion
	}
	return v
}
