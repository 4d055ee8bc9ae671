package clocktest

import (
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)

// fired reports whether tm has fired, and at what clock time.
func fired(tm *Timer) (time.Time, bool) {
	select {
	case at := <-tm.C():
		return at, true
	default:
		return time.Time{}, false
	}
}

func TestTimers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		at     time.Duration // the deadline, from t0
		move   func(c *Clock)
		stop   bool // stop the timer before the move
		want   bool // fired
		wantAt time.Duration
	}{
		{"before the deadline", time.Second, func(c *Clock) { c.Advance(999 * time.Millisecond) }, false, false, 0},
		{"at the deadline", time.Second, func(c *Clock) { c.Advance(time.Second) }, false, true, time.Second},
		{"past the deadline", time.Second, func(c *Clock) { c.Set(t0.Add(time.Minute)) }, false, true, time.Minute},
		{"in steps", time.Second, func(c *Clock) { c.Advance(600 * time.Millisecond); c.Advance(600 * time.Millisecond) }, false, true, 1200 * time.Millisecond},
		{"back", time.Second, func(c *Clock) { c.Set(t0.Add(-time.Hour)) }, false, false, 0},
		{"stopped", time.Second, func(c *Clock) { c.Advance(time.Second) }, true, false, 0},
		{"due when made", 0, func(*Clock) {}, false, true, 0},
		{"overdue when made", -time.Second, func(*Clock) {}, false, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := New(t0)
			tm := c.TimerAt(t0.Add(tc.at))
			if tc.stop {
				if !tm.Stop() {
					t.Fatal("Stop of a pending timer = false, want true")
				}
			}
			tc.move(c)
			at, ok := fired(tm)
			if ok != tc.want {
				t.Fatalf("fired = %v, want %v", ok, tc.want)
			}
			if ok && !at.Equal(t0.Add(tc.wantAt)) {
				t.Fatalf("fired at %v, want %v", at, t0.Add(tc.wantAt))
			}
			// Stop stops only a timer still pending.
			if got, want := tm.Stop(), !ok && !tc.stop; got != want {
				t.Fatalf("Stop() after the move = %v, want %v", got, want)
			}
			if n := c.Pending(); n != 0 {
				t.Fatalf("Pending() = %d after the timer fired or stopped, want 0", n)
			}
		})
	}
}

// TestFiresOnce: a timer fires once however often the clock passes it,
// and the others stay pending until their own deadlines.
func TestFiresOnce(t *testing.T) {
	t.Parallel()
	c := New(t0)
	a, b := c.TimerAt(t0.Add(time.Second)), c.TimerAt(t0.Add(time.Minute))
	c.Advance(time.Second)
	c.Advance(time.Second)
	if _, ok := fired(a); !ok {
		t.Fatal("a did not fire at its deadline")
	}
	if _, ok := fired(a); ok {
		t.Fatal("a fired twice")
	}
	if _, ok := fired(b); ok {
		t.Fatal("b fired before its deadline")
	}
	if got := c.Pending(); got != 1 {
		t.Fatalf("Pending() = %d, want 1 (b)", got)
	}
	if got := c.Now(); !got.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("Now() = %v, want %v", got, t0.Add(2*time.Second))
	}
}

// TestConcurrent is for the race detector: moves, timers and stops from
// several goroutines.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	c := New(t0)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				tm := c.TimerAt(c.Now().Add(time.Duration(i+j) * time.Millisecond))
				c.Advance(time.Millisecond)
				tm.Stop()
			}
		}()
	}
	wg.Wait()
	if n := c.Pending(); n != 0 {
		t.Fatalf("Pending() = %d after every timer was stopped or fired, want 0", n)
	}
}
