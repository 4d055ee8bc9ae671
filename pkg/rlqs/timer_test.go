package rlqs

import (
	"testing"
	"time"
)

// TestWallTimerAt: the default timer waits from the server's Now to the
// deadline, however far Now is from the local clock, and Stop stops it.
func TestWallTimerAt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		offset time.Duration // of Now from the local clock
		in     time.Duration // the deadline, from Now
		stop   bool
		fires  bool // within the wait below
	}{
		{"past", 0, -time.Hour, false, true},
		{"soon", 0, 20 * time.Millisecond, false, true},
		{"soon on a clock an hour ahead", time.Hour, 20 * time.Millisecond, false, true},
		{"soon on a clock an hour behind", -time.Hour, 20 * time.Millisecond, false, true},
		{"later", 0, time.Hour, false, false},
		{"stopped", 0, 20 * time.Millisecond, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			now := func() time.Time { return time.Now().Add(tc.offset) }
			tm := wallTimerAt(now)(now().Add(tc.in))
			if tc.stop && !tm.Stop() {
				t.Fatal("Stop of a pending timer = false, want true")
			}
			select {
			case <-tm.C():
				if !tc.fires {
					t.Fatal("fired, want not yet")
				}
			case <-time.After(time.Second):
				if tc.fires {
					t.Fatal("did not fire within 1 s")
				}
			}
		})
	}
}
