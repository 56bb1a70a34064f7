package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dthrottle/dthrottle/internal/ways/rlheader"
)

// A limit stated per query goes over the daemon's HTTP decision endpoint
// (docs/http-endpoint.md, "A limit stated per request"), never the
// socket: a line on the socket is a tag and its reply one of two words
// (docs/protocol.md), with no room for a limit.

// Limit is a limit a caller states for one query (AllowLimit), in place
// of the tag's policy: Requests per Per, as a leaky bucket (the default)
// or as fixed windows. The daemon checks it (Requests and Burst from 1
// to 2^30, Per from 1 ms to 366 days, a burst that refills within 73
// years); the zero Limit is refused.
type Limit struct {
	Requests int           // requests allowed per Per
	Per      time.Duration // the period, such as 24 * time.Hour
	// Burst is a leaky bucket's capacity: 0 means Requests, so a quiet
	// tag may spend a whole period's requests at once. Not with Window.
	Burst int
	// Window counts Requests per fixed window of Per, aligned to the
	// Unix epoch, all given back when the window ends, rather than a
	// leaky bucket of rate Requests/Per that earns them back one by one.
	Window bool
}

// query is l as the endpoint's query parameters, after "&".
func (l Limit) query() string {
	q := "limit=" + strconv.Itoa(l.Requests) + "&per=" + l.Per.String()
	if l.Burst != 0 {
		q += "&burst=" + strconv.Itoa(l.Burst)
	}
	if l.Window {
		q += "&algorithm=window"
	}
	return q
}

// ErrNoHTTP: AllowLimit was called on a Client whose Config.HTTP is
// empty; the answer is the fail mode's.
var ErrNoHTTP = errors.New("client: no HTTP endpoint to state a limit to: Config.HTTP is empty")

// LimitError is the daemon's refusal of a stated limit itself: out of
// range (Status 400), or under a policy that takes none (403,
// quotas = "none"). AllowLimit then refuses the request whatever the fail
// mode: a caller must not escape its limit by stating a bad one.
type LimitError struct {
	Status int    // the endpoint's status: 400 or 403
	Msg    string // the endpoint's reason
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("client: the daemon refused the stated limit (%d): %s", e.Status, e.Msg)
}

// httpAsker asks the daemon's HTTP decision endpoint.
type httpAsker struct {
	base string // "http://host:port/v1/allow?tag=", or a Unix socket's
	tr   *http.Transport
	hc   *http.Client
}

// newHTTPAsker returns an asker for the endpoint at addr: "host:port", or
// "unix:/path" (http.listen's forms); nil for "".
func newHTTPAsker(addr string, conns int) (*httpAsker, error) {
	if addr == "" {
		return nil, nil
	}
	tr := &http.Transport{MaxIdleConnsPerHost: conns, DisableCompression: true, Proxy: nil}
	base := "http://" + addr + "/v1/allow?tag="
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if path == "" {
			return nil, errors.New("client: HTTP address \"unix:\" names no socket")
		}
		var d net.Dialer
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) { return d.DialContext(ctx, "unix", path) }
		base = "http://dthrottle/v1/allow?tag="
	} else if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("client: HTTP address %q: want \"host:port\" or \"unix:/path\": %w", addr, err)
	}
	return &httpAsker{base: base, tr: tr, hc: &http.Client{Transport: tr}}, nil
}

// AllowLimit asks the daemon whether a request with this tag should be
// served under the limit l states, in place of the tag's policy, over its
// HTTP decision endpoint (Config.HTTP). The Decision's Path is AskedHTTP,
// with Limit, Remaining, RetryAfter and Reset from the answer's header
// fields, which SetHeaders copies. An empty tag is served without
// asking.
//
// When the daemon cannot answer (timeout, no endpoint, backoff, ctx
// done, Client closed, a 503), AllowLimit returns the fail mode's answer
// and the error, as Allow does; its backoff is the HTTP endpoint's own.
// A limit the daemon refuses (*LimitError) and an invalid tag are
// refused whatever the fail mode.
func (c *Client) AllowLimit(ctx context.Context, tag string, l Limit) (Decision, error) {
	switch {
	case tag == "":
		return Decision{OK: true, Path: InProcess}, nil
	case len(tag) > MaxTagLen || strings.IndexByte(tag, '\n') >= 0:
		c.stats.invalid.Add(1)
		return Decision{Path: Failed}, ErrInvalidTag
	case c.http == nil:
		c.stats.errors.Add(1)
		return Decision{OK: c.failed(), Path: Failed}, ErrNoHTTP
	case c.closed.Load():
		c.stats.backedOff.Add(1)
		return Decision{OK: c.failed(), Path: Failed}, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		c.stats.canceled.Add(1)
		return Decision{OK: c.failed(), Path: Failed}, err
	}
	gen, ok := c.httpHealth.admit()
	if !ok {
		c.stats.backedOff.Add(1)
		return Decision{OK: c.failed(), Path: Failed}, ErrBackoff
	}
	qctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	d, err := c.askHTTP(qctx, tag, l)
	if err != nil {
		if isTimeout(err) && ctx.Err() == nil {
			err = ErrTimeout
		}
		ok, err := c.fail(ctx, &c.httpHealth, gen, err)
		return Decision{OK: ok, Path: Failed}, err
	}
	c.httpHealth.succeed(gen)
	if d.err != nil {
		c.stats.badLimits.Add(1)
		return Decision{Path: Failed}, d.err
	}
	if d.OK {
		c.stats.ok.Add(1)
	} else {
		c.stats.no.Add(1)
	}
	return d.Decision, nil
}

// httpAnswer is a Decision and, for a stated limit the daemon refused,
// the *LimitError.
type httpAnswer struct {
	Decision
	err error
}

// maxReason is the most of an answer's body read: "OK\n", "NO\n", or a
// reason of a line.
const maxReason = 512

// askHTTP sends the query and reads the answer; an error means the
// daemon did not decide.
func (c *Client) askHTTP(ctx context.Context, tag string, l Limit) (httpAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.http.base+url.QueryEscape(tag)+"&"+l.query(), nil)
	if err != nil {
		return httpAnswer{}, fmt.Errorf("client: %w", err)
	}
	resp, err := c.http.hc.Do(req)
	if err != nil {
		return httpAnswer{}, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxReason))
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10)) // keep the connection for the next query
	resp.Body.Close()
	if err != nil {
		return httpAnswer{}, fmt.Errorf("client: reading the HTTP endpoint's answer: %w", err)
	}
	text := string(body)
	switch {
	case resp.StatusCode == http.StatusOK && text == "OK\n":
		return httpAnswer{Decision: fromHeaders(true, resp.Header)}, nil
	case (resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusTooManyRequests) && text == "NO\n":
		return httpAnswer{Decision: fromHeaders(false, resp.Header)}, nil
	case resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusRequestURITooLong:
		return httpAnswer{err: &LimitError{Status: resp.StatusCode, Msg: strings.TrimSpace(text)}}, nil
	}
	return httpAnswer{}, fmt.Errorf("client: the HTTP endpoint answered %d: %q", resp.StatusCode, strings.TrimSpace(text))
}

// fromHeaders is the Decision an answer's header fields say: the limit
// applied (RateLimit-Policy's q), the tokens left and the seconds until
// full (RateLimit's r and t), and on a refusal Retry-After.
func fromHeaders(ok bool, h http.Header) Decision {
	d := Decision{OK: ok, Path: AskedHTTP,
		fields: [3]string{h.Get(rlheader.FieldPolicy), h.Get(rlheader.FieldRateLimit), h.Get(rlheader.FieldRetryAfter)}}
	d.Limit = int(sfParam(d.fields[0], "q"))
	d.Remaining = int(sfParam(d.fields[1], "r"))
	d.Reset = time.Duration(sfParam(d.fields[1], "t")) * time.Second
	if s, err := strconv.ParseInt(d.fields[2], 10, 64); err == nil && s > 0 {
		d.RetryAfter = time.Duration(s) * time.Second
	}
	return d
}

// sfParam is the integer parameter key of the first item of a
// structured-field list such as `"api";q=1000;w=86400`; 0 when absent.
func sfParam(field, key string) int64 {
	if strings.HasPrefix(field, `"`) { // the name, which may hold ';' and ','
		for i := 1; i < len(field); i++ {
			if field[i] == '\\' {
				i++
			} else if field[i] == '"' {
				field = field[i+1:]
				break
			}
		}
	}
	if i := strings.IndexByte(field, ','); i >= 0 {
		field = field[:i]
	}
	for p := range strings.SplitSeq(field, ";") {
		if k, v, ok := strings.Cut(strings.TrimSpace(p), "="); ok && k == key {
			n, _ := strconv.ParseInt(v, 10, 64)
			return max(n, 0)
		}
	}
	return 0
}
