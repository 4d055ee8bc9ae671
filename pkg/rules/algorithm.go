package rules

import (
	"fmt"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// algorithmLimits checks what r's algorithm, resolved in l, asks of it, and
// sets l.Burst: burst belongs to token buckets alone, a bucket must refill
// at most one token per microsecond and fill within window.MaxBucketSpan,
// and a sliding log holds at most MaxSlidingLogLimit hits.
func (c *compiler) algorithmLimits(r *RateLimit, l *Limit) {
	burst := r.given("burst", r.Burst != nil) && !r.bad("burst")
	switch {
	case !burst:
	case l.Unlimited:
		c.fail(r.at("burst"), r.field("burst"), "an unlimited limit takes no burst")
		return
	case !l.Algorithm.TakesBurst():
		c.fail(r.at("burst"), r.field("burst"), "applies only to algorithm token_bucket, and this limit's algorithm is %s", l.Algorithm)
		return
	case r.Burst == nil || *r.Burst == 0:
		c.fail(r.at("burst"), r.field("burst"), "must be a positive whole number, got 0")
		return
	}
	if l.Unlimited || l.Size <= 0 {
		return // no window to check against, or its problem is reported
	}
	switch l.Algorithm {
	case window.TokenBucket:
		l.Burst = l.RequestsPerUnit
		if burst {
			l.Burst = *r.Burst
		}
		c.bucket(r, l)
	}
	if most, capped := MaxRequestsPerUnit(l.Algorithm); capped && l.RequestsPerUnit > most {
		c.fail(r.at("requests_per_unit"), r.field("requests_per_unit"),
			"%d is more than %d, the most a sliding_log limit holds: it keeps one entry per hit of its window (use token_bucket or sliding_window for larger limits)",
			l.RequestsPerUnit, most)
	}
}

// bucket checks a token bucket's rate and burst: one token per
// window.Counter.Interval, which must be at least a microsecond, and a
// Tolerance (burst x Interval, the time an empty bucket takes to fill) of
// at most window.MaxBucketSpan.
func (c *compiler) bucket(r *RateLimit, l *Limit) {
	if l.RequestsPerUnit == 0 {
		return // admits nothing, refills nothing
	}
	if us := uint64(l.Size / time.Microsecond); uint64(l.RequestsPerUnit) > us {
		c.fail(r.at("requests_per_unit"), r.field("requests_per_unit"),
			"%d per %v is more than one per microsecond, the fastest a token_bucket refills (at most %d per %v)",
			l.RequestsPerUnit, l.Size, us, l.Size)
		return
	}
	req := window.Counter{Limit: uint64(l.RequestsPerUnit), Size: l.Size, Algorithm: window.TokenBucket}
	most := req.MaxBurst()
	if uint64(l.Burst) <= most {
		return
	}
	field, what := "burst", "burst"
	if !r.given("burst", r.Burst != nil) {
		field, what = "requests_per_unit", "burst (requests_per_unit, as burst is not set)"
	}
	bound := fmt.Sprintf("at this rate burst may be at most %d", most)
	if most == 0 {
		bound = "at this rate not one token fits: shorten the window or raise requests_per_unit"
	}
	c.fail(r.at(field), r.field(field),
		"%s %d at one token per %v takes longer than 2^53 ns (about 104.25 days) to fill, the longest a token_bucket may take; %s",
		what, l.Burst, req.Interval(), bound)
}

// MaxRequestsPerUnit returns the largest requests_per_unit a limit of a
// may have, and false when any fits: a sliding log holds at most
// MaxSlidingLogLimit hits. The rules compiler and Envoy's limit overrides
// both ask it, so the cap is enforced in one place.
func MaxRequestsPerUnit(a window.Algorithm) (uint32, bool) {
	if a == window.SlidingLog {
		return MaxSlidingLogLimit, true
	}
	return 0, false
}
