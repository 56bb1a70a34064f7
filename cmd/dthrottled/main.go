// Command dthrottled answers throttling queries from a local leaky-bucket
// table: a client sends a tag and a newline, and reads OK or NO.
package main

import (
	"context"
	"errors"
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

	log := slog.New(slog.NewTextHandler(stderr, nil))
	d, err := start(cfg, log)
	if err != nil {
		log.Error("cannot start", "config", describe(*path), "err", err)
		return 1
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	var exit int
	select {
	case sig := <-sigs:
		log.Info("stopping", "signal", sig.String())
	case err := <-d.failed:
		log.Error("listener failed", "err", err)
		exit = 1
	}
	signal.Stop(sigs)
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := d.stop(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Warn("unclean stop", "err", err)
		exit = 1
	}
	log.Info("stopped")
	return exit
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
