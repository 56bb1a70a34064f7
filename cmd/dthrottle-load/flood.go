package main

import (
	"flag"
	"fmt"
	"io"
	"time"
)

// cmdFlood sends -tags distinct tags, each once, and prints the server's
// resident memory after every -every of them: with max_tags set, it
// should stop growing once the table is full.
func cmdFlood(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("flood", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "dthrottled: unix:/path or tcp:host:port")
	pid := fs.Int("pid", 0, "dthrottled's process id (required)")
	tags := fs.Int("tags", 10000000, "distinct tags to send")
	every := fs.Int("every", 1000000, "print the resident memory after this many tags")
	if err := fs.Parse(args); err != nil {
		return err
	}
	network, a, err := splitAddr(*addr)
	if err != nil {
		return err
	}
	if *pid == 0 || *every < 1 {
		return fmt.Errorf("flood needs -pid and -every >= 1")
	}
	rss, err := rssBytes(*pid)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "| tags sent | resident memory | send rate |\n|---|---|---|\n| 0 | %.1f MiB | |\n", mib(rss))
	for from := 0; from < *tags; from += *every {
		to := min(from+*every, *tags)
		start := time.Now()
		if err := Prefill(network, a, lineProto{}, 'f', from, to-from, 4, 256); err != nil {
			return err
		}
		rss, err := rssBytes(*pid)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "| %s | %.1f MiB | %.2fM/s |\n", count(to), mib(rss), float64(to-from)/time.Since(start).Seconds()/1e6)
	}
	return nil
}
