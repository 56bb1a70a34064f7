package client

import (
	"net"
	"net/http"
)

// Handler is net/http middleware: it asks the Client about each request's
// tag and serves the request with Next, or answers 429 Too Many Requests
// with the headers of Decision.SetHeaders. When the daemon cannot answer,
// the Client's fail mode decides. Fields must not change while it serves;
// it is then safe for concurrent use. Client, Tag and Next are required.
type Handler struct {
	Client *Client
	// Tag returns a request's throttling tag, for example RemoteIP, or
	// "api:" plus an API key. A request whose tag is "" is served
	// unthrottled.
	Tag func(*http.Request) string
	// Next serves the requests that are allowed.
	Next http.Handler
	// RetryAfter is the Retry-After header of a 429, in seconds. ""
	// means Decision.SetHeaders's: the bucket's when a limit policy
	// refused in process, none when a deny policy did, and "1" when the
	// daemon or the fail mode answered.
	RetryAfter string
	// Refused, if not nil, answers refused requests instead of the plain
	// 429; it should set the status and Retry-After itself (it does not
	// see the Decision: a handler that wants the bucket's headers calls
	// Client.Check and Decision.SetHeaders itself).
	Refused http.Handler
}

// ServeHTTP implements http.Handler. The query uses the request's context:
// a request canceled by its client fails open (or closed) at once.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d, _ := h.Client.Check(r.Context(), h.Tag(r))
	if d.OK {
		h.Next.ServeHTTP(w, r)
		return
	}
	if h.Refused != nil {
		h.Refused.ServeHTTP(w, r)
		return
	}
	d.SetHeaders(w.Header())
	if h.RetryAfter != "" {
		w.Header().Set("Retry-After", h.RetryAfter)
	}
	http.Error(w, "429 too many requests", http.StatusTooManyRequests)
}

// Middleware returns a function wrapping a handler in a Handler that tags
// requests with tag and answers 429 with the headers of
// Decision.SetHeaders when refused.
func (c *Client) Middleware(tag func(*http.Request) string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return &Handler{Client: c, Tag: tag, Next: next}
	}
}

// RemoteIP returns the address of the request's peer without its port:
// the tag for throttling by client address when clients connect directly.
// Behind a proxy, use the address the proxy reports instead, from a header
// only the proxy can set.
func RemoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
