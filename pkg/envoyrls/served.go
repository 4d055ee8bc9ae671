package envoyrls

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// served is the rules a Server answers with and the response parts it
// prepared for their limits, in tables indexed by rules.Limit.ID. SetRules
// swaps it whole, so a request reads one Set and its own tables, and a
// reload never serves a part built for a limit of the old rules. The rules
// stay free of Envoy's response types: the parts belong to the service.
type served struct {
	rules *rules.Set // nil: no rules, every descriptor is OK
	// current is each limit's current_limit, built when the rules are set
	// and shared by every response that reports the limit.
	current []*rlsv3.RateLimitResponse_RateLimit
	// denials is each limit's last 429 parts (see tooMany), nil until its
	// first denial; only fixed windows fill theirs.
	denials []atomic.Pointer[denial]
}

// newServed prepares what the server keeps for the limits of r, which may
// be nil.
func newServed(r *rules.Set) *served {
	limits := r.Limits()
	v := &served{rules: r, current: make([]*rlsv3.RateLimitResponse_RateLimit, len(limits)), denials: make([]atomic.Pointer[denial], len(limits))}
	for i, l := range limits {
		v.current[i] = currentLimit(l)
	}
	return v
}

// currentLimit returns l as Envoy's current_limit: the one prepared for a
// limit of the rules, shared, so callers must not modify it, or for an
// override (which belongs to one request) a new one.
func (v *served) currentLimit(l *rules.Limit) *rlsv3.RateLimitResponse_RateLimit {
	if l.Override {
		return currentLimit(l)
	}
	return v.current[l.ID()]
}

// envoyUnits maps window units to the response's unit enum. The numbers
// differ: window.Unit has Week (5) between Day and Month, while the response
// enum, which gained WEEK last, has MONTH 5, YEAR 6 and WEEK 7. (Envoy's
// RateLimitUnit, of request overrides, has no WEEK.)
var envoyUnits = map[window.Unit]rlsv3.RateLimitResponse_RateLimit_Unit{
	window.Second: rlsv3.RateLimitResponse_RateLimit_SECOND,
	window.Minute: rlsv3.RateLimitResponse_RateLimit_MINUTE,
	window.Hour:   rlsv3.RateLimitResponse_RateLimit_HOUR,
	window.Day:    rlsv3.RateLimitResponse_RateLimit_DAY,
	window.Week:   rlsv3.RateLimitResponse_RateLimit_WEEK,
	window.Month:  rlsv3.RateLimitResponse_RateLimit_MONTH,
	window.Year:   rlsv3.RateLimitResponse_RateLimit_YEAR,
}

// currentLimit builds l's current_limit.
func currentLimit(l *rules.Limit) *rlsv3.RateLimitResponse_RateLimit {
	pb := &rlsv3.RateLimitResponse_RateLimit{
		Name:            l.Name,
		RequestsPerUnit: l.RequestsPerUnit,
		Unit:            envoyUnits[l.Unit],
	}
	if l.Multiplier > 1 {
		pb.UnitMultiplier = wrapperspb.UInt32(l.Multiplier)
	}
	return pb
}

// denial is the body and headers that Envoy sends with an HTTP 429 for one
// limit's denial with one retry-after. It is shared by every response that
// carries it: nothing may modify it once it is stored in served.denials.
type denial struct {
	RetryAfter int64 // whole seconds, at least 1
	Body       []byte
	Headers    []*corev3.HeaderValue
}

// tooMany returns the 429 parts of a denial by l, of domain, with secs of
// retry-after. A configured limit belongs to one domain, and for a fixed
// window every denial by a key under attack within that second gets the
// same parts, so the server keeps the last ones it built per limit
// (served.denials) and responses share them, as they share current_limit:
// nothing writes a response's fields after it is built. Building them
// anew, with JSON marshalling and Sprintf, would cost every denial of a key
// under attack, which the over-limit cache otherwise answers cheaply
// (BenchmarkShouldRateLimitHotKey measures that path). Only fixed windows
// keep them: for the other algorithms retry-after is when that key's own
// counter admits again, which differs from key to key, so a kept one would
// be rewritten, by a write all requests share, at almost every denial; an
// override belongs to one request. Those build their own.
func (v *served) tooMany(domain string, secs int64, l *rules.Limit) *denial {
	if l.Override || l.Algorithm != window.FixedWindow {
		return newDenial(domain, secs, l)
	}
	kept := &v.denials[l.ID()]
	t := kept.Load()
	if t == nil || t.RetryAfter != secs {
		t = newDenial(domain, secs, l)
		kept.Store(t)
	}
	return t
}

// newDenial builds the 429 body and headers of one limit's denials with one
// retry-after.
func newDenial(domain string, secs int64, l *rules.Limit) *denial {
	msg := fmt.Sprintf("rate limit of %d per %s exceeded", l.RequestsPerUnit, windowName(l))
	if l.Algorithm == window.TokenBucket && l.Burst != l.RequestsPerUnit {
		msg = fmt.Sprintf("rate limit of %d per %s (burst %d) exceeded", l.RequestsPerUnit, windowName(l), l.Burst)
	}
	if l.Name != "" {
		msg += " (" + l.Name + ")"
	}
	body, _ := json.Marshal(tooManyRequests{Error: "too_many_requests", Message: msg, RetryAfterSeconds: secs, Domain: domain})
	return &denial{RetryAfter: secs, Body: body, Headers: []*corev3.HeaderValue{
		{Key: "retry-after", Value: strconv.FormatInt(secs, 10)},
		{Key: "content-type", Value: "application/json"},
	}}
}

func windowName(l *rules.Limit) string {
	if l.Multiplier > 1 {
		return fmt.Sprintf("%d %ss", l.Multiplier, l.Unit)
	}
	return l.Unit.String()
}
