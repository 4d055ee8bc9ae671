package rlqs

import "time"

// Timer is a one-shot timer of Options.TimerAt: C delivers once, when it
// fires; Stop prevents that if it has not fired yet and reports whether it
// did. A *clocktest.Timer is one on a clock tests move.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// wallTimerAt is the default Options.TimerAt: a time.Timer for the time
// from now() to at, which fires at once for an at already past. now may be
// offset from the local clock (the Redis server's time): only its rate
// matters.
func wallTimerAt(now func() time.Time) func(at time.Time) Timer {
	return func(at time.Time) Timer { return wallTimer{time.NewTimer(at.Sub(now()))} }
}

type wallTimer struct{ t *time.Timer }

func (w wallTimer) C() <-chan time.Time { return w.t.C }
func (w wallTimer) Stop() bool          { return w.t.Stop() }
