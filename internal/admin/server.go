package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// HTTP server limits. No request here needs a body, so reads are short.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 60 * time.Second
	maxHeaderBytes    = 64 << 10
	// closeGrace is how long Close lets requests in progress finish before
	// it cuts their connections.
	closeGrace = 2 * time.Second
)

// tagsPrefix is where the tag view lives; the rest of the path is the tag.
const tagsPrefix = "/v1/tags/"

// Server is the HTTP admin endpoint. Create it with New, run it with Serve
// and stop it with Close; the zero Server is not usable. Its methods are
// safe for concurrent use.
type Server struct {
	src     Sources
	log     *slog.Logger
	ln      net.Listener
	srv     *http.Server
	handler http.Handler
	now     func() time.Time
	hist    *history // the status page's charts, sampled from New to Close

	closeOnce sync.Once
	closeErr  error
}

// New checks cfg and src, opens the listener on cfg.Addr and returns a
// Server ready to Serve; until Close it samples the policies' counters
// every 5 s for the status page's charts. It fails if the address cannot
// be bound.
func New(cfg Config, src Sources) (*Server, error) {
	s, err := newServer(cfg, src, time.Now)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("admin: listening on %s: %w", cfg.Addr, err)
	}
	s.listenOn(ln, src)
	return s, nil
}

// listenOn makes s serve ln, and starts sampling src for the charts: the
// seam for tests that serve on an in-memory listener.
func (s *Server) listenOn(ln net.Listener, src Sources) {
	s.ln = ln
	if a, ok := ln.Addr().(*net.TCPAddr); ok && a.IP.IsLoopback() {
		s.srv.Handler = loopbackHostsOnly(s.handler)
	}
	warnIfExposed(s.log, ln.Addr())
	s.hist.start(historyStep, src.Snapshot, s.now)
}

// loopbackHostsOnly refuses requests that name a host other than a
// loopback one. On a loopback address that keeps a web page the operator's
// browser visits from reaching the endpoint through a name that resolves
// to 127.0.0.1 (DNS rebinding).
func loopbackHostsOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if hp, _, err := net.SplitHostPort(r.Host); err == nil {
			host = hp
		}
		if ip := net.ParseIP(strings.Trim(host, "[]")); !(host == "localhost" || ip != nil && ip.IsLoopback()) {
			writeError(w, http.StatusForbidden, "host not allowed: use a loopback address or localhost")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// warnIfExposed logs a warning when addr is not a loopback address: the
// endpoint serves tag data and forgets tags without credentials.
func warnIfExposed(log *slog.Logger, addr net.Addr) {
	if a, ok := addr.(*net.TCPAddr); ok && a.IP.IsLoopback() {
		return
	}
	log.Warn("admin endpoint reachable from other hosts: it serves tag data and forgets tags on request; bind a loopback address unless that is intended", "addr", addr.String())
}

// newServer builds a Server without a listener, on the clock now: the seam
// for tests that drive Handler directly.
func newServer(cfg Config, src Sources, now func() time.Time) (*Server, error) {
	switch {
	case cfg.Addr == "":
		return nil, errors.New("admin: Config.Addr is required")
	case src.Snapshot == nil:
		return nil, errors.New("admin: Sources.Snapshot is required")
	case src.Tag == nil:
		return nil, errors.New("admin: Sources.Tag is required")
	case src.Forget == nil:
		return nil, errors.New("admin: Sources.Forget is required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{src: src, log: log, now: now, hist: newHistory(historyLen)}

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	for _, c := range src.Collectors {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("admin: registering metrics: %w", err)
		}
	}
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		Registry: reg, // counts its own errors in promhttp_metric_handler_errors_total
	})

	mux := http.NewServeMux()
	mux.Handle("/metrics", methods{http.MethodGet: metrics})
	mux.Handle("/healthz", methods{http.MethodGet: http.HandlerFunc(s.healthz)})
	mux.Handle("/v1/stats", methods{http.MethodGet: http.HandlerFunc(s.stats)})
	mux.Handle("/v1/peers", methods{http.MethodGet: http.HandlerFunc(s.peers)})
	mux.Handle("/v1/top", methods{http.MethodGet: http.HandlerFunc(s.top)})
	mux.Handle("/{$}", methods{http.MethodGet: http.HandlerFunc(s.status)}) // exactly "/"
	tags := methods{http.MethodGet: http.HandlerFunc(s.getTag), http.MethodDelete: http.HandlerFunc(s.deleteTag)}
	mux.Handle(tagsPrefix+"{tag...}", tags)
	if cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not found")
	})
	s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// ServeMux redirects a path with empty or dot segments ("a//b",
		// "a/../b") to its cleaned form: for a tag, that is another tag,
		// and a client following the redirect of a DELETE would forget the
		// wrong one. Tags are opaque, so take such a path's rest verbatim.
		if rest, ok := strings.CutPrefix(r.URL.Path, tagsPrefix); ok && !isClean(r.URL.EscapedPath()) {
			r.SetPathValue("tag", rest)
			tags.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
	s.srv = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// isClean reports whether ServeMux would leave the escaped path p as it is
// rather than redirect it.
func isClean(p string) bool {
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

// Addr returns the address the server listens on (with the port the
// system chose, when Config.Addr asked for port 0).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Handler returns the server's HTTP handler, for tests that drive it
// without a listener.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve answers requests until Close, then returns nil; any other error
// stops it. Call it once.
func (s *Server) Serve() error {
	err := s.srv.Serve(s.ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("admin: serving on %s: %w", s.ln.Addr(), err)
}

// Close stops the listener, lets requests in progress finish for up to
// two seconds, then cuts the remaining connections. It is safe to call more
// than once, and before Serve.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.hist.stop(closeGrace)
		ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
		defer cancel()
		if err := s.srv.Shutdown(ctx); err != nil {
			s.closeErr = s.srv.Close()
		}
		// Shutdown closes only listeners Serve took; this one may not have been.
		if err := s.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) && s.closeErr == nil {
			s.closeErr = fmt.Errorf("admin: closing %s: %w", s.ln.Addr(), err)
		}
	})
	return s.closeErr
}

// methods routes a request by its method, answers HEAD as GET, and
// answers any other method 405 with the Allow header.
type methods map[string]http.Handler

func (m methods) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	if h, ok := m[method]; ok {
		h.ServeHTTP(w, r)
		return
	}
	allow := make([]string, 0, len(m)+1)
	for k := range m {
		allow = append(allow, k)
		if k == http.MethodGet {
			allow = append(allow, http.MethodHead)
		}
	}
	slices.Sort(allow)
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed")
}
