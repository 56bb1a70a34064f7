// Command dthrottled answers throttling queries from a local leaky-bucket
// table: a client sends a tag and a newline, and reads OK or NO. Peers
// share the hits they served, so a tag holds one rate across the cluster.
// The daemon itself is package internal/daemon; this command parses flags,
// loads the config, handles signals and talks to systemd.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dthrottle/dthrottle/internal/config"
	"github.com/dthrottle/dthrottle/internal/daemon"
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
		fmt.Fprintf(stdout, "dthrottled %s\n", daemon.Version(version))
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
		if err := cfg.CheckPaths(daemon.ConfigFile(*path)...); err != nil {
			fmt.Fprintf(stderr, "dthrottled: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "%s: ok\n", describe(*path))
		return 0
	}

	level := new(slog.LevelVar)
	level.Set(cfg.Log.SlogLevel())
	var handler slog.Handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})
	if cfg.Log.Format == "json" {
		handler = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})
	}
	log := slog.New(handler)
	notify := notifier{log}
	// Signals are caught before the first socket opens: a SIGTERM that
	// comes as soon as the daemon answers stops it cleanly, not by the
	// default action, which would leave its sockets behind.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	inherited, err := daemon.SystemdListeners()
	if err == nil {
		var d *daemon.Daemon
		d, err = daemon.New(daemon.Options{Config: cfg, Path: *path, Listeners: inherited, Logger: log,
			Level: level, Notifier: notify, WatchdogEvery: notify.watchdogEvery(), Version: daemon.Version(version)})
		if err == nil {
			return serve(d, log, sigs)
		}
	}
	log.Error("cannot start", "config", describe(*path), "err", err)
	return 1
}

// serve runs d until sigs brings SIGINT or SIGTERM, reloading it on
// SIGHUP.
func serve(d *daemon.Daemon, log *slog.Logger, sigs <-chan os.Signal) int {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for sig := range sigs {
			if sig == syscall.SIGHUP {
				d.Reload()
				continue
			}
			log.Info("stopping", "signal", sig.String())
			cancel()
			return
		}
	}()
	exit := 0
	if err := d.Run(ctx); err != nil {
		exit = 1
	}
	if err := d.Close(shutdownGrace); err != nil {
		log.Warn("unclean stop", "err", err)
		exit = 1
	}
	return exit
}

func describe(path string) string {
	if path == "" {
		return "built-in defaults"
	}
	return path
}
