// Package clocktest is a clock that only tests move: Now reads it, Set and
// Advance move it, and a timer fires when a move reaches its deadline, so a
// test of something that waits injects the wait instead of sleeping it.
package clocktest

import (
	"sync"
	"time"
)

// Clock is a settable clock with timers. The zero Clock is not usable;
// call New. A Clock is safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*Timer]struct{} // pending: neither fired nor stopped
}

// New returns a Clock reading start.
func New(start time.Time) *Clock {
	return &Clock{now: start, timers: make(map[*Timer]struct{})}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock d on and fires the timers due by then.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLocked(c.now.Add(d))
}

// Set moves the clock to t, back or forth, and fires the timers due by t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLocked(t)
}

func (c *Clock) setLocked(t time.Time) {
	c.now = t
	for tm := range c.timers {
		if !tm.at.After(t) {
			c.fireLocked(tm)
		}
	}
}

// TimerAt returns a timer that fires once the clock reaches at: at once if
// it has. Taking the deadline rather than a duration leaves no gap between
// reading the clock and starting the timer in which a move could be lost.
func (c *Clock) TimerAt(at time.Time) *Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &Timer{c: c, at: at, ch: make(chan time.Time, 1)}
	c.timers[tm] = struct{}{}
	if !at.After(c.now) {
		c.fireLocked(tm)
	}
	return tm
}

// Pending returns how many timers have neither fired nor been stopped.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// fireLocked sends the clock's time on tm's channel, which has room for
// it: a timer fires once.
func (c *Clock) fireLocked(tm *Timer) {
	delete(c.timers, tm)
	tm.ch <- c.now
}

// Timer is a timer of a Clock: its channel receives the clock's time once,
// when a move of the clock reaches the deadline, unless stopped before.
type Timer struct {
	c  *Clock
	at time.Time
	ch chan time.Time // buffered: firing never waits for the receiver
}

// C returns the channel the timer fires on.
func (t *Timer) C() <-chan time.Time { return t.ch }

// Stop prevents the timer from firing. It reports whether it did: false if
// the timer had already fired or been stopped.
func (t *Timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if _, ok := t.c.timers[t]; !ok {
		return false
	}
	delete(t.c.timers, t)
	return true
}
