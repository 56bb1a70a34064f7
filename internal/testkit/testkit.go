// Package testkit is what the tests of many packages share, once: a
// bounded wait for a condition (WaitFor) or for a value on a channel
// (Recv), a clock moved by hand (Clock),
// and an in-memory network (Pipe, Listener) whose connections keep their
// deadlines on the clock of the goroutine that sets them.
//
// Inside a testing/synctest bubble that clock is the bubble's fake one:
// a server served on a Listener created in the bubble, with its clients
// dialled there too, has its idle, handshake, write and request timeouts
// fall due on fake time, at once and exactly, and WaitFor's pauses are
// fake too. Outside a bubble everything works on real time.
//
// It is for tests only; no program imports it.
package testkit

import (
	"sync"
	"testing"
	"time"
)

// WaitFor calls cond until it holds, and fails the test with what was
// awaited if it does not within: every millisecond for the first
// pollSoon, then every pollLater, so that a long wait on a real daemon
// (whose cond may scrape its metrics) does not take a core. Inside a
// synctest bubble the pauses and within are fake time (each pause still
// costs a little real time); there, a condition that holds once every
// goroutine of the bubble is blocked is better awaited with
// synctest.Wait.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	for !cond() {
		if !time.Now().Before(deadline) {
			t.Fatalf("waited %v for %s", within, what)
		}
		step := time.Millisecond
		if time.Since(start) >= pollSoon {
			step = pollLater
		}
		// The next whole step since start, never past the deadline.
		next := start.Add((time.Since(start)/step + 1) * step)
		if next.After(deadline) {
			next = deadline
		}
		time.Sleep(time.Until(next))
	}
}

// WaitFor's pauses: a millisecond at first, then pollLater.
const (
	pollSoon  = 50 * time.Millisecond
	pollLater = 20 * time.Millisecond
)

// Recv returns the next value from ch, and fails the test with what was
// awaited if none comes within. Inside a synctest bubble within is fake
// time: a value that can never come is a deadlock the bubble reports.
func Recv[T any](t testing.TB, ch <-chan T, within time.Duration, what string) T {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("waited %v for %s", within, what)
		panic("unreachable")
	}
}

// Clock is a clock a test moves by hand, for the code that takes its
// time from a func() time.Time (a Config's Clock: pass c.Now). The zero
// Clock stands at the zero time. It is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock standing at start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Add moves the clock by d (back, if d is negative) and returns its new
// time.
func (c *Clock) Add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// Set puts the clock at t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}
