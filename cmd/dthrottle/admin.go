package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// defaultAdmin is where dthrottled's admin endpoint listens in the shipped
// dthrottle.toml.
const defaultAdmin = "127.0.0.1:7071"

// adminTimeout bounds each request to the admin endpoint.
const adminTimeout = 5 * time.Second

// The admin endpoint's JSON documents. Fields the daemon adds later are
// ignored; fields it does not send stay zero.
type (
	healthDoc struct {
		Status             string  `json:"status"`
		Peers              int     `json:"peers"`
		SecondsSinceReport float64 `json:"seconds_since_report"`
	}
	peerDoc struct {
		Node             string    `json:"node"`
		Addr             string    `json:"addr"`
		FirstHeard       time.Time `json:"first_heard"`
		LastHeard        time.Time `json:"last_heard"`
		Packets          uint64    `json:"packets"`
		Hits             uint64    `json:"hits"`
		Lost             uint64    `json:"lost"`
		Duplicates       uint64    `json:"duplicates"`
		FingerprintMatch bool      `json:"fingerprint_match"`
		Silent           bool      `json:"silent"`
	}
	tagDoc struct {
		Tag        string  `json:"tag"`
		Key        string  `json:"key"`
		Tracked    bool    `json:"tracked"`
		Policy     string  `json:"policy"`
		Action     string  `json:"action"`
		Rate       float64 `json:"rate"`
		Burst      float64 `json:"burst"`
		Tokens     float64 `json:"tokens"`
		Debt       float64 `json:"debt"`
		Unreported uint64  `json:"unreported"`
	}
	forgetDoc struct {
		Tag       string `json:"tag"`
		Forgotten bool   `json:"forgotten"`
	}
	statsDoc struct {
		Version     string  `json:"version"`
		Uptime      float64 `json:"uptime_seconds"`
		Tags        uint64  `json:"tags"`
		Evictions   uint64  `json:"evictions"`
		EvictedHits uint64  `json:"evicted_hits"`
		Connections struct {
			Active   uint64 `json:"active"`
			Accepted uint64 `json:"accepted"`
			Rejected uint64 `json:"rejected"`
		} `json:"connections"`
		Queries struct {
			Total       uint64 `json:"total"`
			OK          uint64 `json:"ok"`
			NO          uint64 `json:"no"`
			LineTooLong uint64 `json:"line_too_long"`
		} `json:"queries"`
		Policies []struct {
			Name string `json:"name"`
			OK   uint64 `json:"ok"`
			NO   uint64 `json:"no"`
		} `json:"policies"`
		Gossip struct {
			Enabled         bool   `json:"enabled"`
			Node            string `json:"node"`
			PacketsSent     uint64 `json:"packets_sent"`
			BytesSent       uint64 `json:"bytes_sent"`
			PacketsReceived uint64 `json:"packets_received"`
			BytesReceived   uint64 `json:"bytes_received"`
			Dropped         struct {
				Auth      uint64 `json:"auth"`
				Malformed uint64 `json:"malformed"`
				Version   uint64 `json:"version"`
				Duplicate uint64 `json:"duplicate"`
			} `json:"dropped"`
			Lost                uint64 `json:"lost"`
			FingerprintMismatch uint64 `json:"fingerprint_mismatch"`
			Peers               int    `json:"peers"`
		} `json:"gossip"`
	}
)

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
	var h healthDoc
	if err := fetch("GET", base+"/healthz", &h); err != nil {
		return fail(e, err)
	}
	fmt.Fprintf(e.stdout, "%s: %d peers, last report %s ago\n", h.Status, h.Peers, seconds(h.SecondsSinceReport))
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
	var f forgetDoc
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
