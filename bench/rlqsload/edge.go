package main

import (
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// edgeBucket is one simulated Envoy's state for one bucket_id, deciding requests as Envoy 1.40's
// rate_limit_quota filter does with the example config's behaviours: ALLOW_ALL before the first assignment
// (no_assignment_behavior) and after an assignment's TTL (expired_assignment_behavior's fallback).
//
// Envoy 1.40's arithmetic, which the figures depend on: a token bucket refills continuously at
// tokens_per_fill / fill_interval in whole seconds; the same strategy again only extends the TTL, and
// "the same" compares max_tokens, tokens_per_fill and only the nanos of fill_interval; a replacing token bucket
// starts at the old one's fill ratio, a new one full.
type edgeBucket struct {
	kind    int // one of the edge* constants
	expires time.Time
	// The token bucket, when kind is edgeTokens.
	maxTokens, perFill uint32
	fillNanos          int32
	rate, tokens       float64 // tokens per second; tokens now
	at                 time.Time
}

const (
	edgeNone   = iota // no assignment yet: no_assignment_behavior
	edgeAllow         // blanket ALLOW_ALL
	edgeDeny          // blanket DENY_ALL
	edgeTokens        // token_bucket
)

// Decide decides n requests arriving at now and returns how many it allowed.
func (b *edgeBucket) Decide(now time.Time, n uint64) uint64 {
	kind := b.kind
	if kind != edgeNone && !b.expires.IsZero() && !now.Before(b.expires) {
		kind = edgeNone
	}
	switch kind {
	case edgeDeny:
		return 0
	case edgeTokens:
		b.refill(now)
		got := min(uint64(b.tokens), n)
		b.tokens -= float64(got)
		return got
	}
	return n
}

func (b *edgeBucket) refill(now time.Time) {
	if dt := now.Sub(b.at); dt > 0 {
		b.tokens = min(float64(b.maxTokens), b.tokens+b.rate*dt.Seconds())
		b.at = now
	}
}

// Apply takes one bucket action at now and returns what it was (an actionKind).
func (b *edgeBucket) Apply(now time.Time, a *rlqspb.RateLimitQuotaResponse_BucketAction) actionKind {
	if a.GetAbandonAction() != nil {
		*b = edgeBucket{}
		return actionAbandon
	}
	qa := a.GetQuotaAssignmentAction()
	if qa == nil {
		return actionOther
	}
	var expires time.Time
	if ttl := qa.GetAssignmentTimeToLive(); ttl != nil {
		expires = now.Add(ttl.AsDuration())
	}
	s := qa.GetRateLimitStrategy()
	if tb := s.GetTokenBucket(); tb != nil {
		b.applyTokens(now, tb)
		b.expires = expires
		return actionTokens
	}
	b.kind, b.expires = edgeAllow, expires
	if s.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL {
		b.kind = edgeDeny
		return actionDeny
	}
	return actionAllow
}

func (b *edgeBucket) applyTokens(now time.Time, tb *typev3.TokenBucket) {
	perFill := tb.GetTokensPerFill().GetValue()
	if tb.GetTokensPerFill() == nil {
		perFill = 1
	}
	fill := tb.GetFillInterval()
	if b.kind == edgeTokens && b.maxTokens == tb.GetMaxTokens() && b.perFill == perFill && b.fillNanos == fill.GetNanos() {
		return // Envoy 1.40: the same strategy, only the TTL is new
	}
	ratio := 1.0
	if b.kind == edgeTokens && b.maxTokens > 0 {
		b.refill(now)
		ratio = b.tokens / float64(b.maxTokens)
	}
	rate := 0.0
	if s := fill.GetSeconds(); s > 0 {
		rate = float64(perFill) / float64(s)
	} else {
		// Envoy divides by the whole seconds: a sub-second interval is a division by zero that allows
		// everything. Model it as what it does.
		b.kind = edgeAllow
		return
	}
	*b = edgeBucket{kind: edgeTokens, maxTokens: tb.GetMaxTokens(), perFill: perFill, fillNanos: fill.GetNanos(),
		rate: rate, tokens: ratio * float64(tb.GetMaxTokens()), at: now}
}

// actionKind is what a bucket action did, for the counts the generator reports.
type actionKind int

const (
	actionOther actionKind = iota
	actionTokens
	actionAllow
	actionDeny
	actionAbandon
)
