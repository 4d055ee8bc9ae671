package xds

import (
	"math"
	"time"
)

// Backoff spaces a Client's reconnections: the n-th (from 0) retry after
// a stream broke waits Initial×2ⁿ, at most Max; with Jitter the wait is
// spread by ±RandomFactor of itself (still at most Max). A stream that
// received a push starts again from Initial. The zero Backoff is the
// reference's defaults: 10s, 60s, 0.5, with jitter only when set.
type Backoff struct {
	Initial      time.Duration // default 10s
	Max          time.Duration // default 60s; never below Initial
	RandomFactor float64       // from 0 to 1; default 0.5
	Jitter       bool
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = 10 * time.Second
	}
	if b.Max <= 0 {
		b.Max = 60 * time.Second
	}
	b.Max = max(b.Max, b.Initial)
	if b.RandomFactor <= 0 || b.RandomFactor > 1 {
		b.RandomFactor = 0.5
	}
	return b
}

// delay is the wait before retry attempt, given r drawn uniformly from
// [0, 1).
func (b Backoff) delay(attempt int, r float64) time.Duration {
	d := float64(b.Initial) * math.Pow(2, float64(min(attempt, 62)))
	d = min(d, float64(b.Max))
	if b.Jitter {
		d *= 1 + b.RandomFactor*(2*r-1)
	}
	return time.Duration(min(d, float64(b.Max)))
}
