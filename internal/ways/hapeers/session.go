package hapeers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// This file is one HAProxy process's connection: the handshake, the
// messages it sends taken in order, and the writer that sends dthrottled's
// own (the answer to a resync, acks, heartbeats, flags).

// Timeouts of a connection.
const (
	helloTimeout = 5 * time.Second
	// idleTimeout ends a connection that sent nothing, not even a
	// heartbeat (HAProxy sends one every 3 s of silence).
	idleTimeout = 30 * time.Second
	// heartbeatEvery is the silence after which dthrottled sends a
	// heartbeat: HAProxy ends a connection silent for 5 s.
	heartbeatEvery = 1500 * time.Millisecond
	writeTimeout   = 5 * time.Second
	// ackEvery is the most time an update waits for its ack.
	ackEvery = 100 * time.Millisecond
	// readEvery is the least time between two reads: what an update may
	// wait, at most, for the reads before it.
	readEvery  = 5 * time.Millisecond
	readBuffer = 64 << 10
)

// push is a flag to send: table index and key.
type push struct {
	table int
	key   string
}

// session is one HAProxy process connected.
type session struct {
	s      *Server
	nc     net.Conn
	source uint64
	peer   string

	// Set by the reader alone.
	remote  map[uint64]int // HAProxy's table id: index into the book's tables, -1 for one not followed
	defs    map[uint64]*Definition
	current uint64 // the table HAProxy's updates are for
	hasCur  bool
	lastGet map[uint64]uint32 // per HAProxy table id, the last update id taken
	batch   map[string]int    // the updates of a read, by key: index into updates
	updates []batched
	sent    map[uint64]uint32 // per HAProxy table id, the last update id acked

	mu      sync.Mutex
	pending map[push]uint32 // flags to push, the latest of each
	order   []push          // pending's keys in the order first queued
	ctrl    []byte          // control messages to send
	wake    chan struct{}
}

// queue schedules the flag of key in table ti; the writer sends the latest.
func (c *session) queue(ti int, key string, flag uint32) {
	c.mu.Lock()
	p := push{ti, key}
	if _, ok := c.pending[p]; !ok {
		if len(c.order) >= c.s.cfg.MaxKeys {
			c.mu.Unlock()
			c.s.stats.pushesDropped.Add(1)
			return
		}
		c.order = append(c.order, p)
	}
	c.pending[p] = flag
	c.mu.Unlock()
	c.signal()
}

func (c *session) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// control schedules a control message.
func (c *session) control(typ byte) {
	c.mu.Lock()
	c.ctrl = appendControl(c.ctrl, typ)
	c.mu.Unlock()
	c.signal()
}

// serve speaks the peers protocol on c.nc until it ends.
func (c *session) serve(ctx context.Context) {
	buf := make([]byte, 0, 4096)
	c.nc.SetReadDeadline(time.Now().Add(helloTimeout))
	var lines [3][]byte
	for i := 0; i < 3; {
		line, rest, ok := readHelloLine(buf)
		if ok {
			lines[i] = append([]byte(nil), line...)
			buf = append(buf[:0], rest...)
			i++
			continue
		}
		if len(buf) > maxLine {
			c.s.stats.badHellos.Add(1)
			c.status(statusProtocol)
			return
		}
		n, err := c.nc.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			if n == 0 {
				c.s.stats.badHellos.Add(1)
				return
			}
		}
	}
	h, st := ParseHello(lines[0], lines[1], lines[2])
	if st == statusOK && h.To != c.s.cfg.Name {
		st = statusLocalName
	}
	if st == statusOK && !c.s.knownPeer(h.From) {
		st = statusRemoteName
	}
	if st != statusOK {
		c.s.stats.badHellos.Add(1)
		// Once per name and status: a client that retries logs nothing more.
		c.s.warnOnce(fmt.Sprint("hello ", st, " ", h.From), "haproxy peers: hello refused", "peer", h.From,
			"addr", c.nc.RemoteAddr().String(), "status", st)
		c.status(st)
		return
	}
	if err := c.status(statusOK); err != nil {
		return
	}
	c.peer = h.From
	c.source = c.s.sourceOf(h.From, h.PID)
	c.s.log.Info("haproxy peers: connected", "peer", h.From, "pid", h.PID, "version", h.Minor)
	c.s.book.join(c)
	defer c.s.book.leave(c)

	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { c.write(ctx, done) })
	err := c.read(ctx, buf)
	close(done)
	wg.Wait()
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && ctx.Err() == nil {
		// HAProxy's old process leaves this way at every reload.
		c.s.log.Info("haproxy peers: disconnected", "peer", c.peer, "err", err)
	}
}

// status writes a status line.
func (c *session) status(code int) error {
	c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := c.nc.Write([]byte{byte('0' + code/100), byte('0' + code/10%10), byte('0' + code%10), '\n'})
	return err
}

// read takes messages until the connection ends; buf holds what followed
// the hello.
func (c *session) read(ctx context.Context, buf []byte) error {
	acked, lastRead := time.Now(), time.Time{}
	if cap(buf) < readBuffer {
		buf = append(make([]byte, 0, readBuffer), buf...)
	}
	in := newBatchReader(c.nc)
	defer in.close()
	for {
		for {
			m, n, err := Decode(buf)
			if err != nil {
				c.s.stats.badMessages.Add(1)
				return err
			}
			if n == 0 {
				break
			}
			if err := c.handle(m); err != nil {
				c.s.stats.badMessages.Add(1)
				return err
			}
			buf = buf[n:]
		}
		c.applyBatch()
		// Acks only tell HAProxy where to resume after a reconnection
		// (and the book charges nothing twice then): one every ackEvery
		// at most, or once the updates pause, spares a write per read.
		if time.Since(acked) >= ackEvery {
			c.flushAcks()
			acked = time.Now()
		}
		if len(buf) == cap(buf) || cap(buf)-len(buf) < 1024 {
			buf = append(make([]byte, 0, max(readBuffer, 2*len(buf))), buf...)
		}
		c.nc.SetReadDeadline(time.Now().Add(idleTimeout))
		if c.unacked() {
			c.nc.SetReadDeadline(time.Now().Add(ackEvery))
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// HAProxy pushes an entry each time it changes: reading at most
		// every readEvery takes a busy entry's updates in one batch, in
		// which only its last one counts (take).
		if wait := readEvery - time.Since(lastRead); wait > 0 {
			time.Sleep(wait)
		}
		lastRead = time.Now()
		n, err := in.read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, os.ErrDeadlineExceeded) && n == 0 && ctx.Err() == nil && c.unacked() {
			c.flushAcks()
			acked = time.Now()
			continue
		}
		if err != nil && n == 0 {
			return err
		}
	}
}

// unacked reports whether an update was taken since the last ack.
func (c *session) unacked() bool {
	for id, u := range c.lastGet {
		if c.sent[id] != u {
			return true
		}
	}
	return false
}

// handle takes one message.
func (c *session) handle(m Message) error {
	c.s.stats.messages.Add(1)
	switch m.Class {
	case classControl:
		switch m.Type {
		case ctrlResyncRequest:
			c.s.stats.resyncs.Add(1)
			c.resync()
		case ctrlResyncFinished, ctrlResyncPartial:
			c.control(ctrlResyncConfirm)
		}
		return nil
	case classError:
		return errors.New("hapeers: the peer reported an error")
	case classReserved:
		return errMalformed
	case classStickTable:
	default:
		return nil
	}
	switch m.Type {
	case msgDefine:
		d, err := DecodeDefinition(m.Data)
		if err != nil {
			c.refuse(Definition{Name: "?"}, err.Error())
			return nil // the table's updates are ignored
		}
		c.current, c.hasCur = d.ID, true
		ti, why := c.s.book.define(d)
		c.remote[d.ID] = ti
		if ti < 0 {
			c.refuse(d, why)
			return nil
		}
		dd := d
		c.defs[d.ID] = &dd
	case msgSwitch:
		r := reader{b: m.Data}
		c.current, c.hasCur = r.varint(), r.err == nil
	case msgUpdate, msgIncUpdate, msgUpdateTimed, msgIncUpdateTimed:
		if !c.hasCur {
			return nil
		}
		d := c.defs[c.current]
		u := Update{}
		if d == nil {
			// A table not followed: only its update id matters, for the ack.
			if m.Type == msgUpdate || m.Type == msgUpdateTimed {
				r := reader{b: m.Data}
				u.ID, u.HasID = r.u32(), r.err == nil
			}
		} else {
			var err error
			if u, err = DecodeUpdate(m.Type, m.Data, d); err != nil {
				return err
			}
		}
		if !u.HasID {
			u.ID = c.lastGet[c.current] + 1
		}
		c.lastGet[c.current] = u.ID
		if d != nil {
			c.take(d, &u)
		}
	}
	return nil
}

// batched is an update taken from a read, for its table.
type batched struct {
	table uint64 // HAProxy's id of the table
	def   *Definition
	ti    int
	u     Update
}

// take keeps u, of table d, for the end of the read: an entry's later
// update replaces its earlier one, whose counter it includes.
func (c *session) take(d *Definition, u *Update) {
	c.s.stats.updates.Add(1)
	if i, ok := c.batch[string(u.Key)]; ok && c.updates[i].table == c.current {
		key := c.updates[i].u.Key
		c.updates[i].u = *u
		c.updates[i].u.Key = key
		return
	}
	key := string(u.Key)
	if _, ok := c.batch[key]; !ok {
		c.batch[key] = len(c.updates)
	}
	b := batched{table: c.current, def: d, ti: c.remote[c.current], u: *u}
	b.u.Key = bytesOf(key)
	c.updates = append(c.updates, b)
}

// applyBatch hands the read's updates to the book.
func (c *session) applyBatch() {
	if len(c.updates) == 0 {
		return
	}
	now := c.s.now()
	for i := range c.updates {
		c.s.book.apply(now, c.source, c.updates[i].ti, c.updates[i].def, &c.updates[i].u)
	}
	clear(c.batch)
	c.updates = c.updates[:0]
}

// refuse logs and counts a definition not followed.
func (c *session) refuse(d Definition, why string) {
	c.s.stats.refusedTables.Add(1)
	c.s.warnOnce(d.Name, "haproxy peers: table not followed", "peer", c.peer, "table", d.Name, "reason", why)
}

// flushAcks schedules an ack of every table whose last update changed.
func (c *session) flushAcks() {
	c.mu.Lock()
	changed := false
	for id, u := range c.lastGet {
		if old, ok := c.sent[id]; !ok || old != u {
			c.sent[id] = u
			c.ctrl = AppendAck(c.ctrl, id, u)
			changed = true
		}
	}
	c.mu.Unlock()
	if changed {
		c.signal()
	}
}

// resync answers HAProxy's request for everything dthrottled holds: the
// flag of every key refused now, then "resync finished".
func (c *session) resync() {
	for ti := range c.s.book.tables {
		keys, flags := c.s.book.flagged(ti)
		for i, k := range keys {
			c.queue(ti, k, flags[i])
		}
	}
	c.mu.Lock()
	c.ctrl = append(c.ctrl, byte(classControl), byte(ctrlResyncFinished)) // after the flags (write sends pending first)
	c.mu.Unlock()
	c.signal()
}

// write sends what is scheduled until done, and a heartbeat after
// heartbeatEvery of silence.
func (c *session) write(ctx context.Context, done <-chan struct{}) {
	t := time.NewTicker(heartbeatEvery / 3)
	defer t.Stop()
	last := time.Now()
	defined := make(map[int]bool)
	cur := -1
	var id uint32
	var out []byte
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			c.nc.SetReadDeadline(time.Now()) // ends the reader
			return
		case <-c.wake:
		case <-t.C:
		}
		out = out[:0]
		c.mu.Lock()
		order, pending := c.order, c.pending
		c.order, c.pending = nil, make(map[push]uint32, len(pending))
		ctrl := c.ctrl
		c.ctrl = nil
		c.mu.Unlock()
		for _, p := range order {
			d := c.s.book.definition(p.table)
			if d == nil {
				continue
			}
			if !defined[p.table] {
				out = AppendDefinition(out, *d)
				defined[p.table], cur = true, p.table
			} else if cur != p.table {
				out = appendMessage(out, msgSwitch, appendVarint(nil, d.ID))
				cur = p.table
			}
			id++
			out = AppendUpdate(out, d, id, []byte(p.key), []uint64{uint64(pending[p])})
		}
		out = append(out, ctrl...)
		if len(out) == 0 && time.Since(last) >= heartbeatEvery {
			out = appendControl(out, ctrlHeartbeat)
		}
		if len(out) == 0 {
			continue
		}
		c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := c.nc.Write(out); err != nil {
			c.nc.SetReadDeadline(time.Now()) // ends the reader
			return
		}
		last = time.Now()
	}
}
