package main

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// serveEcho is the I/O ceiling: a plain Go line server that reads like
// dthrottled (a 4 KiB buffer, every complete line answered, one write per
// read) but replies a fixed "OK\n" to every line without deciding
// anything.
func serveEcho(l net.Listener) error { return serveLines(l, nil) }

// decideFunc answers one query at now (Unix nanoseconds).
type decideFunc func(now int64, tag []byte) bool

// burner is the echo server's calibration: a decision that does nothing
// but spend a fixed CPU time, to show what a decision of that cost, and
// nothing else, does to the ratio against echo. It shares nothing between
// connections.
func burner(d time.Duration) decideFunc {
	n := int(float64(d) * spinsPerNs())
	return func(now int64, _ []byte) bool {
		runtime.KeepAlive(spin(uint64(now), n))
		return true
	}
}

// spin runs n steps of a chain of dependent multiply-adds, which no CPU
// can overlap or skip.
func spin(x uint64, n int) uint64 {
	for range n {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

// spinsPerNs measures how many spin steps this CPU runs per nanosecond of
// the calling thread's CPU time, so that other processes taking the CPU
// meanwhile do not skew it.
func spinsPerNs() float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const steps = 1 << 22
	best := time.Duration(1<<63 - 1)
	for i := range 5 {
		start := threadCPU()
		runtime.KeepAlive(spin(uint64(i), steps))
		best = min(best, max(threadCPU()-start, 1))
	}
	return steps / float64(best.Nanoseconds())
}

// threadCPU returns the CPU time the calling thread has used.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		panic(err) // Linux has had this clock since 2.6.12
	}
	return time.Duration(ts.Nano())
}

// mapTable is the table a first attempt would write, the calibration of
// README.md's Performance section: a Go map from tag to bucket behind one mutex, the bucket
// of docs/design.md, Semantics (tokens and the time they were counted) in float64.
type mapTable struct {
	mu      sync.Mutex
	buckets map[string]*mapBucket
	rate    float64 // tokens per nanosecond
	burst   float64
}

type mapBucket struct {
	tokens float64
	last   int64 // Unix nanoseconds
}

func newMapTable(rate float64, burst int) *mapTable {
	return &mapTable{buckets: map[string]*mapBucket{}, rate: rate / 1e9, burst: float64(burst)}
}

// decide answers one query at now (Unix nanoseconds).
func (m *mapTable) decide(now int64, tag []byte) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.buckets[string(tag)]
	if b == nil {
		b = &mapBucket{tokens: m.burst, last: now}
		m.buckets[string(tag)] = b
	}
	if now > b.last {
		b.tokens = min(m.burst, b.tokens+float64(now-b.last)*m.rate)
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// serveLines serves the line protocol on l, answering every line OK when
// decide is nil, else as decide says.
func serveLines(l net.Listener, decide decideFunc) error {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go lineConn(c, decide)
	}
}

func lineConn(c net.Conn, decide decideFunc) {
	defer c.Close()
	buf := make([]byte, 4<<10)
	out := make([]byte, 0, 4<<10)
	r, w := 0, 0
	for {
		if w == len(buf) {
			if r == 0 {
				return // a line longer than the buffer: not ours to serve
			}
			w = copy(buf, buf[r:w])
			r = 0
		}
		n, err := c.Read(buf[w:])
		w += n
		var now int64
		if decide != nil {
			now = time.Now().UnixNano()
		}
		for {
			i := bytes.IndexByte(buf[r:w], '\n')
			if i < 0 {
				break
			}
			if decide == nil || decide(now, buf[r:r+i]) {
				out = append(out, "OK\n"...)
			} else {
				out = append(out, "NO\n"...)
			}
			r += i + 1
		}
		if r == w {
			r, w = 0, 0
		}
		if len(out) > 0 {
			if _, werr := c.Write(out); werr != nil {
				return
			}
			out = out[:0]
		}
		if err != nil {
			return
		}
	}
}

// luaBucket is the leaky bucket of docs/design.md, Semantics, as a Redis script; see
// the file for what it does. Queries call it with EVALSHA.
//
//go:embed leaky_bucket.lua
var luaBucket string

// redisProto frames each query as EVALSHA of luaBucket with the tag as
// its key, in RESP.
type redisProto struct {
	prefix []byte // everything of the command before the tag
	suffix []byte // everything after it
}

func newRedisProto(rate float64, burst int) redisProto {
	sum := sha1.Sum([]byte(luaBucket))
	sha := hex.EncodeToString(sum[:])
	r, b := strconv.FormatFloat(rate, 'g', -1, 64), strconv.Itoa(burst)
	return redisProto{
		prefix: fmt.Appendf(nil, "*6\r\n$7\r\nEVALSHA\r\n$40\r\n%s\r\n$1\r\n1\r\n", sha),
		suffix: fmt.Appendf(nil, "$%d\r\n%s\r\n$%d\r\n%s\r\n", len(r), r, len(b), b),
	}
}

func (p redisProto) Request(dst, tag []byte) []byte {
	dst = append(dst, p.prefix...)
	dst = append(dst, '$')
	dst = strconv.AppendInt(dst, int64(len(tag)), 10)
	dst = append(dst, "\r\n"...)
	dst = append(dst, tag...)
	dst = append(dst, "\r\n"...)
	return append(dst, p.suffix...)
}

// Replies counts integer replies (:1 OK, :0 NO); any other reply is an
// error.
func (redisProto) Replies(b []byte) (consumed, replies, ok int, err error) {
	for {
		i := bytes.IndexByte(b[consumed:], '\n')
		if i < 0 {
			return consumed, replies, ok, nil
		}
		line := b[consumed : consumed+i+1]
		switch string(line) {
		case ":1\r\n":
			ok++
		case ":0\r\n":
		default:
			return consumed, replies, ok, fmt.Errorf("redis: unexpected reply %q", strings.TrimSpace(string(line)))
		}
		replies++
		consumed += i + 1
	}
}

// redisCommand sends one command and returns its first reply line, for
// setting up (SCRIPT LOAD) and looking at Redis (INFO).
func redisCommand(network, addr string, args ...string) (string, error) {
	c, err := net.Dial(network, addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	var req []byte
	req = fmt.Appendf(req, "*%d\r\n", len(args))
	for _, a := range args {
		req = fmt.Appendf(req, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write(req); err != nil {
		return "", err
	}
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		return "", err
	}
	switch line[0] {
	case '-':
		return "", fmt.Errorf("redis: %s", strings.TrimSpace(line[1:]))
	case '$':
		n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
		if err != nil || n < 0 {
			return "", fmt.Errorf("redis: bad bulk reply %q", line)
		}
		body := make([]byte, n+2)
		if _, err := io.ReadFull(br, body); err != nil {
			return "", err
		}
		return string(body[:n]), nil
	}
	return strings.TrimSpace(line[1:]), nil
}

// rssBytes returns the resident memory of process pid.
func rssBytes(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}
