// Package caddydthrottle is a Caddy module, the HTTP handler
// http.handlers.dthrottle and its Caddyfile directive dthrottle, that
// throttles requests through a dthrottled on the same machine. Each
// request's tag is a placeholder expression ({remote_host},
// {header.X-Api-Key}, api:{header.X-Api-Key}) replaced for the request;
// the package client decides it, in Caddy's own process from the table
// the daemon shares when it shares one (no round trip), over the daemon's
// Unix socket otherwise. A served request goes on to the next handler; a
// refused one is answered with Status (429 by default), Retry-After and,
// when the bucket is known, the RateLimit-Policy and RateLimit headers.
// When the daemon cannot answer, the fail mode does: open (serve) by
// default, or closed (refuse).
//
// Handlers with the same socket, fail mode and timeout share one client,
// across the sites of a config and across config reloads, so that a
// reload neither attaches to the table again nor drops what the client
// has learnt of the daemon's health.
//
// The module lives in a Go module of its own, so that dthrottle's main
// module never depends on Caddy; build.sh builds a Caddy with it, as
// xcaddy would.
package caddydthrottle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/dthrottle/dthrottle/client"
)

func init() {
	caddy.RegisterModule(Handler{})
	httpcaddyfile.RegisterHandlerDirective("dthrottle", parseCaddyfile)
	// Before authentication: a client refused here spends nothing on
	// checking its credentials (and cannot guess passwords at full speed).
	httpcaddyfile.RegisterDirectiveOrder("dthrottle", httpcaddyfile.Before, "basicauth")
}

// DefaultSocket is the daemon's socket when Socket is empty: the path of
// the shipped systemd unit and dthrottle.toml.
const DefaultSocket = "/run/dthrottle/dthrottle.sock"

// Handler throttles requests through dthrottled. Its zero value, given a
// Tag, is valid: the default socket, fail open, 429, the client's default
// timeout. Once provisioned it is safe for concurrent use.
type Handler struct {
	// Tag is the throttling tag, a placeholder expression replaced per
	// request. A tag that is empty once replaced is served without a
	// decision, as the daemon serves an empty tag.
	Tag string `json:"tag"`
	// Socket is the path of dthrottled's Unix socket. Default:
	// DefaultSocket.
	Socket string `json:"socket,omitempty"`
	// Fail is the answer when the daemon cannot answer: "open" (serve,
	// the default) or "closed" (refuse).
	Fail string `json:"fail,omitempty"`
	// Status is the status code of a refusal, 400 to 599. Default: 429.
	Status int `json:"status,omitempty"`
	// Timeout bounds a query asked over the socket, dialing included.
	// Default: the client's, 5 ms.
	Timeout caddy.Duration `json:"timeout,omitempty"`

	key      poolKey
	client   *client.Client
	constTag bool // Tag holds no placeholder
	released bool // Cleanup let go of the client
	body     string
	logger   *zap.Logger
	down     *atomic.Bool // the daemon did not answer the last query asked
}

// CaddyModule returns the module's information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.dthrottle",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision fills in the defaults and takes the client of the handler's
// socket, fail mode and timeout from the pool. It does not dial: a daemon
// absent at start is not an error, only fail-mode answers until it is
// there.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	h.down = new(atomic.Bool)
	if h.Socket == "" {
		h.Socket = DefaultSocket
	}
	if h.Fail == "" {
		h.Fail = "open"
	}
	if h.Status == 0 {
		h.Status = http.StatusTooManyRequests
	}
	if err := h.Validate(); err != nil {
		return err
	}
	h.constTag = !strings.ContainsAny(h.Tag, "{}")
	h.body = http.StatusText(h.Status)
	if h.body == "" {
		h.body = "Refused"
	}
	h.body += "\n"
	mode := client.FailOpen
	if h.Fail == "closed" {
		mode = client.FailClosed
	}
	h.key = poolKey{socket: h.Socket, mode: mode, timeout: time.Duration(h.Timeout)}
	c, err := takeClient(h.key)
	if err != nil {
		return fmt.Errorf("dthrottle: %w", err)
	}
	h.client = c
	h.logger.Debug("deciding through dthrottled", zap.String("socket", h.Socket), zap.String("fail", h.Fail))
	return nil
}

// Validate checks the configuration, its defaults filled in or not.
func (h *Handler) Validate() error {
	if h.Tag == "" {
		return errors.New("dthrottle: no tag")
	}
	switch h.Fail {
	case "", "open", "closed":
	default:
		return fmt.Errorf("dthrottle: fail %q: must be open or closed", h.Fail)
	}
	if h.Status != 0 && (h.Status < 400 || h.Status > 599) {
		return fmt.Errorf("dthrottle: status %d: must be from 400 to 599", h.Status)
	}
	if h.Timeout < 0 {
		return fmt.Errorf("dthrottle: timeout %v: must not be negative", time.Duration(h.Timeout))
	}
	return nil
}

// Cleanup gives the client back to the pool, which closes it once no
// handler of the running config holds it.
func (h *Handler) Cleanup() error {
	// h.client stays set: a request still running past Caddy's grace
	// period may read it (a closed client answers by the fail mode).
	if h.client == nil || h.released {
		return nil
	}
	h.released = true
	return releaseClient(h.key)
}

// ServeHTTP decides the request's tag: a served request goes to next, a
// refused one is answered here. Asked over the socket, the query ends with
// the request's context (a client gone away is answered by the fail mode,
// and its answer dropped).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	tag := h.Tag
	if !h.constTag {
		repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
		tag = repl.ReplaceAll(h.Tag, "")
	}
	d, err := h.client.Check(r.Context(), tag)
	if err != nil {
		h.failed(r.Context(), err)
	} else if h.down.Load() && h.down.CompareAndSwap(true, false) {
		h.logger.Info("dthrottled answers again", zap.String("socket", h.Socket))
	}
	if d.OK {
		return next.ServeHTTP(w, r)
	}
	hdr := w.Header()
	d.SetHeaders(hdr)
	hdr.Set("Content-Type", "text/plain; charset=utf-8")
	hdr.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(h.Status)
	io.WriteString(w, h.body) // an error here is the client's going away
	return nil
}

// failed logs why a query was not decided by the daemon: once when the
// daemon stops answering (until it answers again), never for a client
// that went away, at debug level for a tag the line protocol cannot
// carry. Tags are never logged: they may be credentials.
func (h *Handler) failed(ctx context.Context, err error) {
	switch {
	case errors.Is(err, client.ErrInvalidTag):
		if ce := h.logger.Check(zap.DebugLevel, "refused a tag with a newline or over 64 KiB"); ce != nil {
			ce.Write()
		}
	case ctx.Err() != nil:
	case h.down.CompareAndSwap(false, true):
		h.logger.Warn("dthrottled does not answer; the fail mode does until it answers again",
			zap.String("socket", h.Socket), zap.String("fail", h.Fail), zap.Error(err))
	}
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
