// Command dthrottled answers throttling queries from a local leaky-bucket
// table: a client sends a tag and a newline, and reads OK or NO. Peers
// share the hits they served, so a tag holds one rate across the cluster.
package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/dthrottle/dthrottle/config"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

// shutdownGrace bounds how long a stop waits for connections to finish
// answering what they have read.
const shutdownGrace = 5 * time.Second

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dthrottled", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "TOML config `file` (default: built-in defaults)")
	check := fs.Bool("check", false, "validate the config and exit: 0 if valid, 1 if not")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dthrottled: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *showVersion {
		fmt.Fprintf(stdout, "dthrottled %s\n", versionString())
		return 0
	}

	cfg := config.Default()
	if *path != "" {
		var err error
		if cfg, err = config.Load(*path); err != nil {
			fmt.Fprintf(stderr, "dthrottled: %v\n", err)
			return 1
		}
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "dthrottled: %v\n", err)
		return 1
	}
	if *check {
		fmt.Fprintf(stdout, "%s: ok\n", describe(*path))
		return 0
	}

	log, level := newLogger(cfg.Log, stderr)
	notify := notifier{log}
	d, err := start(cfg, *path, log, level)
	if err != nil {
		log.Error("cannot start", "config", describe(*path), "err", err)
		return 1
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	var watchdog <-chan time.Time
	if every := notify.watchdogEvery(); every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		watchdog = t.C
	}
	notify.ready()

	exit := 0
loop:
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				notify.reloading()
				d.reloaded(d.reload())
				notify.ready()
				continue
			}
			log.Info("stopping", "signal", sig.String())
			break loop
		case <-watchdog:
			if d.healthy() {
				notify.watchdog()
			} else {
				log.Error("table not answering: not feeding the watchdog")
			}
		case err := <-d.failed:
			log.Error("listener failed", "err", err)
			exit = 1
			break loop
		}
	}
	notify.stopping()
	if err := d.stop(shutdownGrace); err != nil {
		log.Warn("unclean stop", "err", err)
		exit = 1
	}
	log.Info("stopped")
	return exit
}

// reloaded logs and counts the outcome of a reload.
func (d *daemon) reloaded(err error) {
	d.mu.Lock()
	if err != nil {
		d.reloadFailures++
	} else {
		d.reloads++
	}
	d.mu.Unlock()
	if err != nil {
		d.log.Error("reload failed: keeping the running config", "err", err)
	}
}

// newLogger writes to w in the configured format, from the configured
// level on; the level can change on reload.
func newLogger(cfg config.Log, w io.Writer) (*slog.Logger, *slog.LevelVar) {
	level := new(slog.LevelVar)
	level.Set(logLevel(cfg.Level))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), level
	}
	return slog.New(slog.NewTextHandler(w, opts)), level
}

// logLevel maps a validated log.level to slog's.
func logLevel(s string) slog.Level {
	switch s {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

func describe(path string) string {
	if path == "" {
		return "built-in defaults"
	}
	return path
}

func versionString() string {
	v := version
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
