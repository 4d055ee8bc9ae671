package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// response builds the answer from the store's results (or with none
// needed). A counter the store failed for is left out, unless its failure
// mode is deny: then it is over its limit (see window.Counter.FailClosed for how long). A
// quota-mode limit that is over makes its status OVER_LIMIT but the
// request OVER_LIMIT only when every quota descriptor is over (see
// Server.quotaMode); with Options.ShadowMode an OVER_LIMIT answer becomes
// OK (its statuses keep saying which limits are over), as in
// envoyproxy/ratelimit.
func (s *Server) response(req *rlsv3.RateLimitRequest, c *scratch, now time.Time) *rlsv3.RateLimitResponse {
	resp, resets := newResponse(len(req.Descriptors))
	var retry time.Duration
	var worst *rules.Limit
	var unlimited bool
	for k, l := range c.limits {
		slot := c.slot[k]
		if slot < 0 {
			unlimited = true
			continue
		}
		r, res := &c.reqs[slot], c.res[slot]
		var remaining uint64
		var reset, wait time.Duration // duration_until_reset; retry-after when over
		var over, statusOver bool     // denies the request; reported in the status
		switch {
		case c.isFailed(slot) && l.FailureMode != rules.FailDeny:
			if s.quotaMode(l) {
				// Its failure mode lets it pass: a quota with room.
				c.markQuota(c.owner[k], len(req.Descriptors), l, false, 0)
			}
			continue // nothing is known, and its failure mode lets it pass
		case c.isFailed(slot):
			// Fails closed (failureResponse observed it).
			reset, wait = r.FailClosed(now)
			over, statusOver = true, true
		case res.Skipped:
			// Not read: another counter of this denied request was known
			// full and the read of the others failed (see
			// window.OverLimitCache). The limit itself is configuration, so
			// report it, as Envoy lists it in x-ratelimit-limit whether or
			// not the cache answered; its count is unknown, so it states no
			// remaining or reset of its own.
			if st := resp.Statuses[c.owner[k]]; st.CurrentLimit == nil {
				st.CurrentLimit = c.served.currentLimit(l)
			}
			continue
		default:
			remaining = r.Remaining(res, now)
			reset = r.Reset(res, now)
			over = res.Over && !l.Shadow
			if over { // only a denial needs it; for a window it is reset again
				wait = r.RetryAfter(res, now)
			}
			if s.quotaMode(l) {
				// Reported over, deciding only with the other quotas.
				c.markQuota(c.owner[k], len(req.Descriptors), l, over, wait)
				statusOver, over = over, false
			} else {
				statusOver = over
			}
			s.observe(req, c, k, res, remaining, now)
		}
		st := resp.Statuses[c.owner[k]]
		if tighter(st, statusOver, remaining, reset) {
			st.CurrentLimit = c.served.currentLimit(l)
			st.LimitRemaining = uint32(min(remaining, math.MaxUint32))
			// Each status has its own Duration: what a looser limit wrote
			// there, a tighter one overwrites.
			d := &resets[c.owner[k]]
			d.Seconds, d.Nanos = int64(reset/time.Second), int32(reset%time.Second)
			st.DurationUntilReset = d
		}
		if statusOver {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if over {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			if worst == nil || wait >= retry {
				retry, worst = wait, l
			}
		}
	}
	if unlimited {
		markUnlimited(resp, c)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT && c.quotaSpent() {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		retry, worst = c.quotaRetry()
	}
	switch {
	case resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && s.shadow:
		resp.OverallCode = rlsv3.RateLimitResponse_OK
	case resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT:
		addTooManyRequests(resp, c.served, req.Domain, retry, worst)
	}
	if s.meta {
		resp.DynamicMetadata = s.dynamicMetadata(req, c, resp.Statuses)
	}
	return resp
}

// markUnlimited reports limit_remaining 4294967295, as envoyproxy/ratelimit
// does, and no current_limit, for a descriptor with an unlimited limit
// where no other limit of it reported one.
func markUnlimited(resp *rlsv3.RateLimitResponse, c *scratch) {
	for k, slot := range c.slot {
		if st := resp.Statuses[c.owner[k]]; slot < 0 && st.CurrentLimit == nil {
			st.LimitRemaining = math.MaxUint32
		}
	}
}

// oneStatus is a response of one status, the usual answer, in one
// allocation instead of four.
type oneStatus struct {
	resp   rlsv3.RateLimitResponse
	ptrs   [1]*rlsv3.RateLimitResponse_DescriptorStatus
	status rlsv3.RateLimitResponse_DescriptorStatus
	resets [1]durationpb.Duration
}

// newResponse returns an OK response of n OK statuses, and per status a
// Duration for its duration_until_reset to point at: four allocations
// whatever n, one for n = 1.
func newResponse(n int) (*rlsv3.RateLimitResponse, []durationpb.Duration) {
	if n == 1 {
		o := &oneStatus{}
		o.resp.OverallCode, o.status.Code = rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK
		o.ptrs[0] = &o.status
		o.resp.Statuses = o.ptrs[:]
		return &o.resp, o.resets[:]
	}
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, n),
	}
	statuses := make([]rlsv3.RateLimitResponse_DescriptorStatus, n)
	for i := range statuses {
		statuses[i].Code = rlsv3.RateLimitResponse_OK
		resp.Statuses[i] = &statuses[i]
	}
	return resp, make([]durationpb.Duration, n)
}

// tighter reports whether a limit should replace the one a status reports:
// an over-limit one beats one with room, then the least remaining, then the
// longest wait.
func tighter(st *rlsv3.RateLimitResponse_DescriptorStatus, over bool, remaining uint64, reset time.Duration) bool {
	if st.CurrentLimit == nil {
		return true
	}
	if stOver := st.Code == rlsv3.RateLimitResponse_OVER_LIMIT; over != stOver {
		return over
	}
	if rem := uint64(st.LimitRemaining); remaining != rem {
		return remaining < rem
	}
	return reset > st.DurationUntilReset.AsDuration()
}

func (s *Server) observe(req *rlsv3.RateLimitRequest, c *scratch, k int, res window.Result, remaining uint64, now time.Time) {
	if s.obs == nil {
		return
	}
	l, r := c.limits[k], &c.reqs[c.slot[k]]
	d := s.decision(req, c, k, OutcomeOK)
	switch {
	case res.Over && (l.Shadow || s.shadow && !s.quotaMode(l)):
		// Over a quota-mode limit stays over_limit under global shadow
		// mode, as envoyproxy/ratelimit's stats count it.
		d.Outcome = OutcomeShadowOverLimit
	case res.Over:
		d.Outcome = OutcomeOverLimit
	case r.Capacity()-remaining > d.NearLimit: // remaining <= Capacity
		d.Outcome = OutcomeNearLimit
	}
	d.Used = r.Used(res, now)
	if (c.counted || r.Charge) && d.Hits > 0 { // a charge is counted, allowed or not
		d.Used -= min(d.Used, r.Taken(d.Hits)) // a log adds at most Limit+1 entries
	}
	s.obs.Decision(d)
}

// decision is what an Observer is told of limit k, less what the store
// answered.
func (s *Server) decision(req *rlsv3.RateLimitRequest, c *scratch, k int, o Outcome) Decision {
	l, owner, r := c.limits[k], c.owner[k], &c.reqs[c.slot[k]]
	d := Decision{
		Domain:    c.domain,
		Limit:     l,
		Value:     metricValue(req, owner, l),
		Entries:   req.Descriptors[owner].Entries,
		Outcome:   o,
		NearLimit: uint64(math.Floor(s.near * float64(r.Capacity()))),
	}
	if r.Refund {
		d.Refunded = r.Hits
	} else {
		d.Hits = r.Hits
	}
	return d
}

// metricValue is the value an Observer is given, as Observer promises:
// for a limit with DetailedMetric the descriptor's last value as its
// counter key has it, else for one with ValueToMetric its label with the
// request's values (built anew: one allocation per decision, for these
// rules alone), else "". (Metrics blanks it again itself: its handle cache
// must not grow with client input whoever calls it.)
func metricValue(req *rlsv3.RateLimitRequest, owner int, l *rules.Limit) string {
	e := req.Descriptors[owner].Entries
	switch {
	case l.DetailedMetric:
		return l.KeyValue(len(e)-1, e[len(e)-1].Value)
	case l.ValueToMetric:
		return string(l.AppendMetricRule(nil, e))
	}
	return ""
}

// failureResponse decides a request whose store call failed, wholly or (on
// Redis Cluster, a *window.PartialError) for some counters. Answered counters
// decide as usual; each failed one applies its limit's failure mode: any
// "deny" makes the request OVER_LIMIT, else any "error" returns
// ErrUnavailable (Unavailable, once ShouldRateLimit maps it) so Envoy's
// failure_mode_deny decides, else the answered counters decide.
// If a failure mode refuses a request whose answered counters were counted,
// their hits are given back.
func (s *Server) failureResponse(ctx context.Context, req *rlsv3.RateLimitRequest, c *scratch, now time.Time, allowed bool, err error) (*rlsv3.RateLimitResponse, error) {
	for range c.res {
		c.failed = append(c.failed, false)
	}
	var partial *window.PartialError
	if errors.As(err, &partial) {
		for _, i := range partial.Failed {
			c.failed[i] = true
		}
	} else {
		allowed = false // nothing was counted
		for i := range c.failed {
			c.failed[i] = true
		}
	}
	c.counted = allowed
	var deny, unavailable bool
	for k, l := range c.limits {
		slot := c.slot[k]
		if slot < 0 || !c.isFailed(slot) {
			continue
		}
		switch l.FailureMode {
		case rules.FailDeny:
			deny = true
		case rules.FailError:
			unavailable = true
		}
		if s.obs != nil {
			s.obs.Decision(s.decision(req, c, k, OutcomeFailureMode))
		}
	}
	s.log.Debug("store failed", zap.String("domain", req.Domain), zap.Bool("deny", deny), zap.Bool("unavailable", unavailable), zap.Error(err))
	// Global shadow mode answers OK where a failure mode denies: the hits
	// stay counted then, as for any allowed request.
	if allowed && (deny && !s.shadow || !deny && unavailable) {
		s.refund(ctx, now, c)
	}
	if !deny && unavailable {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	resp := s.response(req, c, now)
	s.refundQuotaDenial(ctx, now, c, resp)
	return resp, nil
}

// tooManyRequests is the JSON body Envoy sends with its 429.
type tooManyRequests struct {
	Error             string `json:"error"`
	Message           string `json:"message"`
	RetryAfterSeconds int64  `json:"retry_after_seconds"`
	Domain            string `json:"domain"`
}

// addTooManyRequests adds retry-after (whole seconds, at least 1, of the
// longest wait among the over-limit counters: until a window resets, or
// for a token bucket or sliding log until the request's hits would fit;
// see window.Counter.RetryAfter), content-type and the JSON body to an
// OVER_LIMIT response, prepared by v (see served.tooMany). l is the limit
// that decided it.
func addTooManyRequests(resp *rlsv3.RateLimitResponse, v *served, domain string, retry time.Duration, l *rules.Limit) {
	secs := int64(math.Ceil(retry.Seconds()))
	if secs < 1 {
		secs = 1
	}
	t := v.tooMany(domain, secs, l)
	resp.RawBody, resp.ResponseHeadersToAdd = t.Body, t.Headers
}
