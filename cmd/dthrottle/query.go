package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/dthrottle/dthrottle/client"
	"github.com/dthrottle/dthrottle/internal/config"
)

// socketFlags are the flags saying where the daemon listens.
type socketFlags struct {
	socket, tcp string
	timeout     time.Duration
}

func (s *socketFlags) register(fs *flag.FlagSet, timeout time.Duration) {
	fs.StringVar(&s.socket, "socket", config.DefaultUnixPath(), "the daemon's Unix socket `path`")
	fs.StringVar(&s.tcp, "tcp", "", "the daemon's TCP `address` (host:port), instead of -socket")
	fs.DurationVar(&s.timeout, "timeout", timeout, "how long to wait for each answer")
}

func (s *socketFlags) config() client.Config {
	cfg := client.Config{Network: "unix", Address: s.socket, Timeout: s.timeout, Conns: 1}
	if s.tcp != "" {
		cfg.Network, cfg.Address = "tcp", s.tcp
	}
	return cfg
}

// query asks about each tag in turn and prints "TAG OK" or "TAG NO".
func query(args []string, e env) int {
	fs := newFlags("query", e)
	var sf socketFlags
	sf.register(fs, 50*time.Millisecond)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		return fail(e, errors.New("query: no tag given"))
	}
	c, err := client.New(sf.config())
	if err != nil {
		return fail(e, err)
	}
	defer c.Close()
	code := exitOK
	for _, tag := range fs.Args() {
		ok, err := c.Allow(context.Background(), tag)
		if err != nil {
			return fail(e, fmt.Errorf("query %q: %w", tag, err))
		}
		answer := "OK"
		if !ok {
			answer, code = "NO", exitRefused
		}
		fmt.Fprintf(e.stdout, "%s %s\n", tag, answer)
	}
	return code
}

// rewriteMap answers Apache's RewriteMap prg: protocol: for each key read
// on stdin, one line, OK or NO, flushed at once. Apache sends one key at a
// time and waits for its answer while every other request needing the map
// waits behind it, so an answer must never be slow: each query is bounded
// by -timeout, and while the daemon is unreachable the fail mode answers at
// once (the client backs off). Errors are logged to stderr (Apache's error
// log) when the daemon becomes unreachable and when it answers again, never
// per line.
func rewriteMap(args []string, e env) int {
	fs := newFlags("rewritemap", e)
	var sf socketFlags
	sf.register(fs, client.DefaultTimeout)
	prefix := fs.String("prefix", "", "`text` put before each key, to select a [[policy]] by prefix")
	failMode := fs.String("fail", "open", "the answer when the daemon cannot answer: `open` (OK) or closed (NO)")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return fail(e, fmt.Errorf("rewritemap: unexpected argument %q", fs.Arg(0)))
	}
	cfg := sf.config()
	switch *failMode {
	case "open":
	case "closed":
		cfg.FailMode = client.FailClosed
	default:
		return fail(e, fmt.Errorf("rewritemap: -fail %q: must be open or closed", *failMode))
	}
	c, err := client.New(cfg)
	if err != nil {
		return fail(e, err)
	}
	defer c.Close()
	in := bufio.NewReader(e.stdin)
	out := bufio.NewWriter(e.stdout)
	down := false
	for {
		line, rerr := in.ReadString('\n')
		if len(line) == 0 && rerr != nil {
			if rerr == io.EOF {
				return exitOK
			}
			return fail(e, fmt.Errorf("rewritemap: reading keys: %w", rerr))
		}
		key := trimEOL(line)
		ok, err := c.Allow(context.Background(), *prefix+key)
		switch {
		case err != nil && !errors.Is(err, client.ErrInvalidTag) && !down:
			down = true
			fmt.Fprintf(e.stderr, "dthrottle rewritemap: daemon unreachable, failing %s: %v\n", c.FailMode(), err)
		case err == nil && down:
			down = false
			fmt.Fprintf(e.stderr, "dthrottle rewritemap: daemon answering again\n")
		}
		if ok {
			out.WriteString("OK\n")
		} else {
			out.WriteString("NO\n")
		}
		if err := out.Flush(); err != nil {
			return fail(e, fmt.Errorf("rewritemap: writing answers: %w", err))
		}
	}
}

// trimEOL removes a trailing "\n" or "\r\n".
func trimEOL(s string) string {
	if n := len(s); n > 0 && s[n-1] == '\n' {
		s = s[:n-1]
	}
	if n := len(s); n > 0 && s[n-1] == '\r' {
		s = s[:n-1]
	}
	return s
}
