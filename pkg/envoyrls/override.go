package envoyrls

import (
	"fmt"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// overrideLimit is Envoy's per-descriptor limit override, which replaces the
// configured limits. It is keyed apart from them and, as in
// envoyproxy/ratelimit, is never in shadow mode. It takes the failure mode,
// algorithm and over_limit of the rule the descriptor matches (its limits
// are matched), else the domain's, else charges. As the override has no
// burst, a token bucket's is its requests_per_unit, or the most tokens
// that fill within window.MaxBucketSpan when fewer (a burst that rules
// would refuse): the bucket holds no more, and Capacity must not promise
// more than it admits.
func overrideLimit(o *rlv3.RateLimitDescriptor_RateLimitOverride, matched []*rules.Limit, dom *rules.Domain) *rules.Limit {
	unit, _ := overrideUnit(o.Unit) // validated
	mult := uint32(1)
	if o.UnitMultiplier != nil {
		mult = o.UnitMultiplier.Value
	}
	size, _ := window.Size(unit, uint64(mult)) // validated
	l := &rules.Limit{RequestsPerUnit: o.RequestsPerUnit, Unit: unit, Multiplier: mult, Size: size, Rule: "override",
		FailureMode: rules.FailError, OverLimit: rules.OverLimitCharge, Override: true}
	switch {
	case len(matched) > 0:
		l.FailureMode, l.Algorithm, l.OverLimit = matched[0].FailureMode, matched[0].Algorithm, matched[0].OverLimit
	case dom != nil:
		l.FailureMode, l.Algorithm, l.OverLimit = dom.FailureMode, dom.Algorithm, dom.OverLimit
	}
	if l.Algorithm.TakesBurst() && l.RequestsPerUnit > 0 {
		r := window.Counter{Limit: uint64(l.RequestsPerUnit), Size: size, Algorithm: l.Algorithm}
		fits := max(r.MaxBurst(), 1)
		l.Burst = uint32(min(uint64(l.RequestsPerUnit), fits))
	}
	return l
}

// checkOverride refuses the override l of descriptor i when it asks more
// than its algorithm holds: a sliding log's memory grows with its limit, so
// an override may not raise it past what rules accept
// (rules.MaxSlidingLogLimit).
func checkOverride(l *rules.Limit, i int) error {
	if most, ok := rules.MaxRequestsPerUnit(l.Algorithm); ok && l.RequestsPerUnit > most {
		return fmt.Errorf("%w: descriptor %d limit override of %d is more than %d, the most a %s limit holds",
			ErrInvalidRequest, i, l.RequestsPerUnit, most, l.Algorithm)
	}
	return nil
}

func overrideUnit(u typev3.RateLimitUnit) (window.Unit, bool) {
	switch u {
	case typev3.RateLimitUnit_SECOND:
		return window.Second, true
	case typev3.RateLimitUnit_MINUTE:
		return window.Minute, true
	case typev3.RateLimitUnit_HOUR:
		return window.Hour, true
	case typev3.RateLimitUnit_DAY:
		return window.Day, true
	case typev3.RateLimitUnit_MONTH:
		return window.Month, true
	case typev3.RateLimitUnit_YEAR:
		return window.Year, true
	}
	return 0, false
}
