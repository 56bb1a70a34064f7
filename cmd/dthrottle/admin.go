package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/dthrottle/dthrottle/api"
)

// defaultAdmin is where dthrottled's admin endpoint listens in the shipped
// dthrottle.toml.
const defaultAdmin = "127.0.0.1:7071"

// adminTimeout bounds each request to the admin endpoint.
const adminTimeout = 5 * time.Second

// adminFlags parses the admin subcommands' flags and returns the
// endpoint's base URL and the remaining arguments, or ok false with the
// exit code.
func adminFlags(name string, args []string, nargs int, e env) (base string, rest []string, code int, ok bool) {
	fs := newFlags(name, e)
	addr := fs.String("admin", defaultAdmin, "the daemon's admin endpoint, `host:port` or a URL")
	if code, ok := parse(fs, args); !ok {
		return "", nil, code, false
	}
	if fs.NArg() != nargs {
		fs.Usage()
		return "", nil, exitError, false
	}
	base = strings.TrimSuffix(*addr, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	return base, fs.Args(), 0, true
}

// fetch sends a request to the admin endpoint and decodes its JSON answer
// into doc.
func fetch(method, u string, doc any) error {
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		return fmt.Errorf("admin request: %w", err)
	}
	hc := http.Client{Timeout: adminTimeout}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("admin endpoint: %w (is admin.http set in the daemon's config?)", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("reading %s %s: %w", method, u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, strings.TrimSpace(string(body[:min(len(body), 200)])))
	}
	if err := json.Unmarshal(body, doc); err != nil {
		return fmt.Errorf("decoding %s %s: %w", method, u, err)
	}
	return nil
}

// tagURL is the admin URL of one tag, escaped so any bytes fit in a path
// segment.
func tagURL(base, tag string) string { return base + "/v1/tags/" + url.PathEscape(tag) }

func health(args []string, e env) int {
	base, _, code, ok := adminFlags("health", args, 0, e)
	if !ok {
		return code
	}
	var h api.Health
	if err := fetch("GET", base+"/healthz", &h); err != nil {
		return fail(e, err)
	}
	last := "none yet (or gossip off)"
	if h.SecondsSinceReport != nil {
		last = seconds(*h.SecondsSinceReport) + " ago"
	}
	fmt.Fprintf(e.stdout, "%s: %d peers, last report %s\n", h.Status, h.Peers, last)
	if h.Status != "ok" {
		return exitRefused
	}
	return exitOK
}

func forget(args []string, e env) int {
	base, rest, code, ok := adminFlags("forget", args, 1, e)
	if !ok {
		return code
	}
	var f api.Forget
	if err := fetch("DELETE", tagURL(base, rest[0]), &f); err != nil {
		return fail(e, err)
	}
	if f.Forgotten {
		fmt.Fprintf(e.stdout, "%s: forgotten, its bucket is full again\n", rest[0])
	} else {
		fmt.Fprintf(e.stdout, "%s: was not tracked (its bucket was full)\n", rest[0])
	}
	return exitOK
}

// seconds formats a number of seconds as a rounded duration.
func seconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}
