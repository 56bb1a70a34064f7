// Package inproc decides dthrottle queries in the calling process, from
// the table the daemon shares over its Unix socket (docs/shared-table.md):
// no round trip and no system call for a tag the table holds. A tag it
// does not hold yet, a tag longer than the daemon keeps verbatim, or a
// reload under way are asked over the socket, which the daemon answers
// and, for a new tag, inserts, so that its next query is decided here.
// When the daemon leaves the table (it stopped, or has not beaten in it
// for a second), Decide answers by the fail mode and attaches again at
// most every RetryEvery.
package inproc

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dthrottle/dthrottle/internal/bucket"
)

// RetryEvery is the least time between two attempts to attach.
const RetryEvery = 100 * time.Millisecond

// Path says which path decided a query.
type Path uint8

const (
	// Local: decided in this process from the shared table.
	Local Path = iota
	// Asked: asked over the socket.
	Asked
	// Failed: the daemon could not be reached; the fail mode answered.
	Failed
)

// Result is a decision and how it was made.
type Result struct {
	OK       bool
	Path     Path
	Decision bucket.Decision // Local only: the policy and header values
}

// Stats counts the decisions by path.
type Stats struct {
	Local, Asked, Failed uint64
	Attaches             uint64 // successful attaches, the first included
}

// Table decides from a daemon's shared table. It is safe for concurrent
// use: decisions in process take no lock; asking over the socket is
// serialised.
type Table struct {
	path     string
	failOpen bool

	view atomic.Pointer[Mapping] // nil while not attached

	mu   sync.Mutex // guards conn, rd, next, the reattaching
	conn *net.UnixConn
	rd   *bufio.Reader
	next time.Time // no attach before this

	local, asked, failed, attaches atomic.Uint64
}

// Mapping is one attach's mapped files: the daemon's table, as it was
// when the daemon handed it out. Mappings are never unmapped (goroutines
// may be deciding from one when the daemon leaves it): the table's
// address space (some tens of MB, shared pages) per restart of the
// daemon; Attach reuses the mapping of a table it is handed again.
type Mapping struct {
	view         *bucket.View
	table, state []byte
	id           [2]uint64 // the table file's device and inode
}

// Decide decides a query for tag at now (Unix nanoseconds) from the
// mapping; see bucket.View.Decide. It is safe for concurrent use.
func (m *Mapping) Decide(now int64, tag []byte) bucket.Decision { return m.view.Decide(now, tag) }

// DecideInto is Decide writing the answer to *out; see
// bucket.View.DecideInto.
func (m *Mapping) DecideInto(now int64, tag []byte, out *bucket.Decision) bucket.Code {
	return m.view.DecideInto(now, tag, out)
}

// Attach connects to the daemon's Unix socket at path, asks for its
// table, maps it and closes the connection, all within timeout. A daemon
// that does not share its table gives a nil Mapping and no error. When
// the daemon hands out the table prev maps (it stalled, and beats
// again), Attach returns prev rather than mapping the same files again.
func Attach(path string, timeout time.Duration, prev *Mapping) (*Mapping, error) {
	deadline := time.Now().Add(timeout)
	d := net.Dialer{Deadline: deadline}
	nc, err := d.Dial("unix", path)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	return request(nc.(*net.UnixConn), deadline, prev)
}

// Open attaches to the daemon listening on the Unix socket path. failOpen
// is the answer while the daemon cannot be reached. A daemon that does
// not share its table leaves every query to the socket. Open fails only
// when the socket cannot be reached at all.
func Open(path string, failOpen bool) (*Table, error) {
	t := &Table{path: path, failOpen: failOpen}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.attachLocked(); err != nil {
		return nil, err
	}
	return t, nil
}

// Shared reports whether decisions are made in process now.
func (t *Table) Shared() bool { return t.view.Load() != nil }

// Stats returns the counts of decisions by path.
func (t *Table) Stats() Stats {
	return Stats{Local: t.local.Load(), Asked: t.asked.Load(), Failed: t.failed.Load(), Attaches: t.attaches.Load()}
}

// Allow is Decide(tag).OK.
func (t *Table) Allow(tag []byte) bool { return t.Decide(tag).OK }

// Decide answers a query for tag.
func (t *Table) Decide(tag []byte) (r Result) {
	if m := t.view.Load(); m != nil {
		switch m.view.DecideInto(time.Now().UnixNano(), tag, &r.Decision) {
		case bucket.OK:
			r.OK = true
			fallthrough
		case bucket.No:
			t.local.Add(1)
			r.Path = Local
			return r
		case bucket.Left:
			t.leave(m)
		}
	}
	return t.ask(tag)
}

// leave drops mapping m, which the daemon left, unless another goroutine
// already did.
func (t *Table) leave(m *Mapping) {
	if t.view.CompareAndSwap(m, nil) {
		// Other goroutines may still be reading m: leave it mapped (a few
		// pages of address space per restart of the daemon).
		t.mu.Lock()
		t.closeConnLocked()
		t.mu.Unlock()
	}
}

// ask asks the daemon over the socket, attaching first if need be.
func (t *Table) ask(tag []byte) Result {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range tag {
		if b == '\n' {
			t.failed.Add(1)
			return Result{OK: t.failOpen, Path: Failed}
		}
	}
	if t.conn == nil {
		if time.Now().Before(t.next) || t.attachLocked() != nil {
			t.failed.Add(1)
			return Result{OK: t.failOpen, Path: Failed}
		}
	}
	t.conn.SetDeadline(time.Now().Add(time.Second))
	line := make([]byte, 0, len(tag)+1)
	line = append(append(line, tag...), '\n')
	if _, err := t.conn.Write(line); err == nil {
		if reply, err := t.rd.ReadString('\n'); err == nil && (reply == "OK\n" || reply == "NO\n") {
			t.asked.Add(1)
			return Result{OK: reply == "OK\n", Path: Asked}
		}
	}
	t.closeConnLocked()
	if m := t.view.Load(); m != nil {
		t.view.CompareAndSwap(m, nil)
	}
	t.failed.Add(1)
	return Result{OK: t.failOpen, Path: Failed}
}

func (t *Table) closeConnLocked() {
	if t.conn != nil {
		t.conn.Close()
		t.conn, t.rd = nil, nil
	}
	t.next = time.Now().Add(RetryEvery)
}

// attachLocked connects and asks for the table.
func (t *Table) attachLocked() error {
	t.next = time.Now().Add(RetryEvery)
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: t.path, Net: "unix"})
	if err != nil {
		return err
	}
	m, err := request(c, time.Now().Add(time.Second), nil)
	if err != nil {
		c.Close()
		return err
	}
	t.conn, t.rd = c, bufio.NewReader(c)
	if m != nil {
		t.view.Store(m)
	}
	t.attaches.Add(1)
	return nil
}

// request sends the attach request on c and maps the files the daemon
// sends back, if any, by deadline; or returns prev when they are the
// files prev maps.
func request(c *net.UnixConn, deadline time.Time, prev *Mapping) (*Mapping, error) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer null.Close()
	c.SetDeadline(deadline)
	defer c.SetDeadline(time.Time{})
	if _, _, err := c.WriteMsgUnix([]byte("\n"), syscall.UnixRights(int(null.Fd())), nil); err != nil {
		return nil, err
	}
	var buf [3]byte
	oob := make([]byte, syscall.CmsgSpace(2*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf[:], oob)
	if err != nil {
		return nil, err
	}
	for n < 3 { // the rest of "OK\n", without ancillary data
		k, err := c.Read(buf[n:])
		if err != nil {
			return nil, err
		}
		n += k
	}
	if string(buf[:]) != "OK\n" {
		return nil, fmt.Errorf("inproc: attach answered %q", buf[:])
	}
	fds := rights(oob[:oobn])
	defer func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}()
	if len(fds) != 2 {
		return nil, nil // the daemon does not share its table
	}
	return mapFiles(fds[0], fds[1], prev)
}

func rights(oob []byte) []int {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var out []int
	for _, m := range msgs {
		if fds, err := syscall.ParseUnixRights(&m); err == nil {
			out = append(out, fds...)
		}
	}
	return out
}

// mapFiles maps the table file read-only and the state file read-write,
// unless the table file is the one prev maps: then prev.
func mapFiles(tfd, sfd int, prev *Mapping) (*Mapping, error) {
	var ts, ss unix.Stat_t
	if err := unix.Fstat(tfd, &ts); err != nil {
		return nil, err
	}
	if err := unix.Fstat(sfd, &ss); err != nil {
		return nil, err
	}
	id := [2]uint64{uint64(ts.Dev), ts.Ino}
	if prev != nil && prev.id == id {
		return prev, nil
	}
	tn, sn := int(ts.Size), int(ss.Size)
	tb, err := unix.Mmap(tfd, 0, tn, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	sb, err := unix.Mmap(sfd, 0, sn, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Munmap(tb)
		return nil, err
	}
	v, err := bucket.NewView(tb, sb)
	if err != nil {
		unix.Munmap(tb)
		unix.Munmap(sb)
		return nil, errors.Join(err, errors.New("inproc: the daemon sent files that are not its table"))
	}
	return &Mapping{view: v, table: tb, state: sb, id: id}, nil
}

// Close closes the connection. Mappings stay until the process exits:
// goroutines may be deciding from them.
func (t *Table) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.view.Store(nil)
	if t.conn != nil {
		err := t.conn.Close()
		t.conn, t.rd = nil, nil
		return err
	}
	return nil
}

// PolicyOf returns the policy that made decision d, for the headers of
// its answer; see bucket.View.PolicyOf.
func (m *Mapping) PolicyOf(d bucket.Decision) (bucket.Policy, bool) { return m.view.PolicyOf(d) }
