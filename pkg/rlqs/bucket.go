package rlqs

import (
	"context"
	"errors"
	"maps"
	"math/bits"
	"slices"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// streamBucket is what a stream keeps of one bucket between reports.
type streamBucket struct {
	id  *rlqsv3.BucketId // as Envoy sent it first, for the answers
	key string           // bucketKey of id: its name on the stream
	// ruled: the last report matched limits, so a report that matches
	// none means the rule went away: abandon_action.
	ruled bool
	// pushAt is when the windows that deny the bucket have all reset, and
	// next the assignment to send then; pushAt is zero when none is due.
	pushAt time.Time
	next   verdict
	// recheckAt is when the ledger expects room for a larger share
	// (Share.Recheck: another client's decrease has reached its Envoy by
	// then); zero when none is due.
	recheckAt time.Time
	// held is the token bucket last sent, which Strategy compares with
	// as Envoy does; nil when none.
	held *typev3.RateLimitStrategy
	// spentUntil is when the windows that deny the bucket have all reset
	// (zero when none is spent): until then a re-check must not replace
	// the DENY_ALL, which only the reset's push lifts.
	spentUntil time.Time
	// sent: an assignment for the bucket went out on this stream.
	sent bool
	// waitUntil is set when the bucket's first report on this stream was
	// a periodic one (Envoy had the bucket before: a reconnect, which may
	// hold an assignment another stream sent). While its share is capped
	// below its target, nothing is sent, so Envoy keeps that assignment
	// (still counted under the old stream's client until it lapses),
	// until waitUntil, one TTL on, by when it has expired in Envoy.
	waitUntil time.Time
	// rule is the bucket's match against the rules served, nil until the
	// first report.
	rule *bucketRule
}

// bucketRule is a bucket's match against one Domain of the rules (see
// rules.Domain.MatchBucket) and its limits' counters. A bucket keeps it
// while the same rules are served: its reports and re-checks need it every
// few seconds, and matching the tree and building the keys cost more than
// the rest of a re-check.
type bucketRule struct {
	dom      *rules.Domain
	limits   []*rules.Limit
	entries  []*rlv3.RateLimitDescriptor_Entry
	counters []window.Counter // one per limit; the zero Counter for an unlimited one
}

// match is b's rule under dom, the Domain of the rules served now (nil when
// they have no such domain), matched again only when dom changed: a reload
// or an xDS push serves new Domains. c builds the counters.
func (b *streamBucket) match(dom *rules.Domain, c Counters, domain string) *bucketRule {
	if b.rule != nil && b.rule.dom == dom {
		return b.rule
	}
	r := &bucketRule{dom: dom}
	r.limits, r.entries = dom.MatchBucket(b.id.GetBucket())
	r.counters = make([]window.Counter, len(r.limits))
	for i, l := range r.limits {
		if !l.Unlimited {
			r.counters[i] = c.Counter(domain, r.entries, l)
		}
	}
	b.rule = r
	return r
}

// usage is one accepted BucketQuotaUsage being handled.
type usage struct {
	b               *streamBucket
	allowed, denied uint64
	elapsed         time.Duration // > 0 for a periodic report; 0 for a subscription
	limits          []*rules.Limit
	first           int // the index of its first counter in the report's store call
}

// accepted is the Refusal-typed "no refusal" of accept.
const accepted Refusal = numRefusals

// accept checks u against the sanity caps and returns its usage, with its
// bucket (new buckets join the stream here), or why it is refused.
// seen holds the buckets of the report so far.
func (st *stream) accept(now time.Time, u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, seen map[string]bool) (*usage, Refusal) {
	lim := &st.s.limits
	entries := u.GetBucketId().GetBucket()
	if len(entries) == 0 {
		return nil, RefusedEmptyBucket
	}
	if len(entries) > lim.MaxEntries {
		return nil, RefusedBadBucket
	}
	for k, v := range entries {
		if len(k) > lim.MaxEntryBytes || len(v) > lim.MaxEntryBytes {
			return nil, RefusedBadBucket
		}
	}
	elapsed, ok := elapsedOf(u.GetTimeElapsed(), lim.MaxElapsed)
	if !ok {
		return nil, RefusedBadElapsed
	}
	total, carry := bits.Add64(u.GetNumRequestsAllowed(), u.GetNumRequestsDenied(), 0)
	// elapsed ≤ MaxElapsed, so the product cannot overflow for any sane
	// MaxRate; bits.Mul64 makes sure for any.
	hi, most := bits.Mul64(lim.MaxRate, uint64(max((elapsed+time.Second-1)/time.Second, 1)))
	if carry != 0 || hi == 0 && total > most {
		return nil, RefusedAbsurdCounts
	}
	key := bucketKey(entries)
	if seen[key] {
		return nil, RefusedDuplicate
	}
	b := st.buckets[key]
	if b == nil {
		if len(st.buckets) >= st.s.maxBuckets {
			return nil, RefusedMaxBuckets
		}
		b = &streamBucket{id: u.GetBucketId(), key: key}
		if elapsed > 0 {
			b.waitUntil = now.Add(st.s.ttl)
		}
		st.buckets[key] = b
		st.s.obs.Buckets(1)
	}
	seen[key] = true
	return &usage{b: b, allowed: u.GetNumRequestsAllowed(), denied: u.GetNumRequestsDenied(), elapsed: elapsed}, accepted
}

// elapsedOf returns a usage's time_elapsed as the ledger takes it.
// Envoy 1.40 truncates it to whole seconds, and its first report of a new
// bucket (the subscription, sent at the bucket's first request) says 0:
// 0 or missing is passed on as 0, a demand not yet measured (Report). The
// sanity cap on counts reads it as the 1 s it is less than. Negative,
// malformed and longer than most is not believed.
func elapsedOf(d *durationpb.Duration, most time.Duration) (time.Duration, bool) {
	if d == nil {
		return 0, true
	}
	if d.CheckValid() != nil || d.GetSeconds() < 0 || d.GetNanos() < 0 {
		return 0, false
	}
	e := d.AsDuration()
	switch {
	case e > most:
		return 0, false
	}
	return e, true
}

// bucketKey names a bucket_id on its stream: its entries in key order,
// escaped as counter keys are, so distinct buckets never share a name.
func bucketKey(entries map[string]string) string {
	if len(entries) == 1 {
		// The common bucket of one entry needs no sort.
		for k, v := range entries {
			return string(window.AppendKeyEntry(nil, k, v))
		}
	}
	var b []byte
	for _, k := range slices.Sorted(maps.Keys(entries)) {
		b = window.AppendKeyEntry(b, k, entries[k])
	}
	return string(b)
}

// takeResult is the answer of a report's store call, and of its ledger
// call.
type takeResult struct {
	reqs []window.Counter
	res  []window.Result
	err  error
	// shares holds the ledger's answers; ledgerAt[i], the index in it of
	// counter i's, is -1 for a counter the ledger was not asked about.
	shares   []Result
	ledgerAt []int
}

// assign asks the ledger, in one call, for the client's share of every
// limit of the report whose verdict is a share: not unlimited, not in
// shadow mode, and charged (a counter the store failed for takes its
// failure mode).
func (st *stream) assign(ctx context.Context, now time.Time, work []*usage, t *takeResult) {
	t.ledgerAt = make([]int, len(t.reqs))
	reqs := make([]Request, 0, len(t.reqs)) // at most one a counter
	for _, w := range work {
		slot, first := w.first, len(reqs)
		spent := false
		for _, l := range w.limits {
			if l.Unlimited {
				continue
			}
			t.ledgerAt[slot] = -1
			if !t.failed(slot) && !l.Shadow && !st.s.shadow {
				t.ledgerAt[slot] = len(reqs)
				reqs = append(reqs, Request{Key: t.reqs[slot].Key, Fleet: fleetOf(l), TTL: st.s.ttl,
					Report: Report{Client: st.client, Allowed: w.allowed, Denied: w.denied, Elapsed: w.elapsed}})
				spent = spent || t.reqs[slot].Remaining(t.res[slot], now) == 0
			}
			slot++
		}
		if len(reqs)-first == 1 && len(w.limits) == 1 && w.quiet(now, spent) {
			// Envoy holds this bucket's token bucket for long enough: a
			// report that changes nothing need not be written or answered
			// (Request.Quiet). Until its next report is answered: its
			// elapsed time again, and a second for the answer.
			reqs[first].Quiet, reqs[first].Hold = true, w.elapsed+time.Second
		}
	}
	if len(reqs) > 0 {
		t.shares = st.s.ledger.Assign(ctx, now, reqs)
	}
}

// quiet reports whether w's one ledger request may be Quiet: a periodic
// report of a bucket whose window is not spent, and whose last assignment
// on this stream was a token bucket of the ledger's share, so a kept share
// leaves Envoy exactly what the report would send again.
func (w *usage) quiet(now time.Time, spent bool) bool {
	b := w.b
	return w.elapsed > 0 && !spent && b.sent && b.held != nil && b.spentUntil.IsZero() && b.pushAt.IsZero() && !now.Before(b.waitUntil)
}

// failed reports whether the store failed for counter i.
func (t *takeResult) failed(i int) bool {
	if t.err == nil {
		return false
	}
	var pe *window.PartialError
	if errors.As(t.err, &pe) {
		_, found := slices.BinarySearch(pe.Failed, i)
		return found
	}
	return true
}

// verdict is what a bucket gets: a kind, and for a token bucket its
// strategy; keep (send nothing) when a limit whose failure mode is error
// could not be decided, so Envoy keeps its last assignment until its TTL.
type verdict struct {
	kind     Kind
	keep     bool
	strategy *typev3.RateLimitStrategy // for KindTokenBucket
	ttl      time.Duration             // for a quota assignment
	expires  time.Time                 // when the assignment lapses, for a push
	failed   bool                      // a failure mode decided it
}

// rank orders verdicts by how restrictive they are; the most restrictive
// of a bucket's limits applies.
func (v *verdict) rank() int {
	switch {
	case v.kind == KindDenyAll:
		return 3
	case v.keep:
		return 2
	case v.kind == KindTokenBucket:
		return 1
	}
	return 0
}

// stricter reports whether v restricts more than w.
func (v *verdict) stricter(w *verdict) bool {
	if v.rank() != w.rank() {
		return v.rank() > w.rank()
	}
	if v.kind == KindTokenBucket {
		// The lower rate, then the smaller burst, is more restrictive.
		vr, wr := StrategyRate(v.strategy), StrategyRate(w.strategy)
		return vr < wr || vr == wr && v.strategy.GetTokenBucket().GetMaxTokens() < w.strategy.GetTokenBucket().GetMaxTokens()
	}
	return v.kind == KindDenyAll && v.ttl > w.ttl // the longer denial
}

// send returns v as b's bucket_action at now, and remembers the token
// bucket it sends; nil to send nothing.
func (b *streamBucket) send(v *verdict, now time.Time) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	a := v.action(b.id, now)
	if a != nil && v.kind != KindAbandon {
		b.held = v.strategy
		b.sent = true
	}
	return a
}

// action is v as Envoy's bucket_action at now; nil to send nothing.
func (v *verdict) action(id *rlqsv3.BucketId, now time.Time) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	a := &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: id}
	switch {
	case v.keep:
		return nil
	case v.kind == KindAbandon:
		a.BucketAction = &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}
		return a
	}
	ttl := v.ttl
	if !v.expires.IsZero() {
		// A push: what is left of the assignment, in the whole seconds
		// Envoy reads.
		ttl = v.expires.Sub(now).Truncate(time.Second)
		if ttl < time.Second {
			return nil
		}
	}
	s := v.strategy
	if v.kind != KindTokenBucket {
		rule := typev3.RateLimitStrategy_ALLOW_ALL
		if v.kind == KindDenyAll {
			rule = typev3.RateLimitStrategy_DENY_ALL
		}
		s = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}
	}
	a.BucketAction = &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
		QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			AssignmentTimeToLive: durationpb.New(ttl),
			RateLimitStrategy:    s,
		}}
	return a
}

// decide returns the verdict of one usage, whose counters t answered:
// abandon when its rule went away, ALLOW_ALL without limits, else the most
// restrictive of its limits' verdicts (see limitVerdict). A bucket denied
// because a window is spent gets, at the reset, the assignment it would
// have had (streamBucket.next, pushed by the stream).
func (st *stream) decide(now time.Time, w *usage, t *takeResult) verdict {
	b := w.b
	b.pushAt, b.next, b.recheckAt, b.spentUntil = time.Time{}, verdict{}, time.Time{}, time.Time{}
	if len(w.limits) == 0 {
		if b.ruled {
			// Envoy drops the bucket; its next request subscribes again
			// and finds no rule: ALLOW_ALL.
			st.forget(b)
			return verdict{kind: KindAbandon}
		}
		return verdict{kind: KindAllowAll, ttl: st.s.ttl}
	}
	b.ruled = true
	out := verdict{kind: KindAllowAll, ttl: st.s.ttl}
	held := out // the verdict without the spent windows' denials
	var resetAt time.Time
	failed := false
	slot := w.first
	for _, l := range w.limits {
		if l.Unlimited {
			continue
		}
		v, reset := st.limitVerdict(now, w, l, t, slot)
		slot++
		failed = failed || v.failed
		if v.stricter(&held) {
			held = v
		}
		if reset > 0 {
			resetAt = later(resetAt, now.Add(reset))
			v = verdict{kind: KindDenyAll, ttl: min(wholeSecondsUp(reset), st.s.ttl)}
		}
		if v.stricter(&out) {
			out = v
		}
	}
	if failed {
		// A re-check asks only the ledger: it must not replace what a
		// failure mode decided. The next report decides again.
		b.recheckAt = time.Time{}
	}
	b.spentUntil = resetAt
	if !resetAt.IsZero() && held.kind != KindDenyAll && !held.keep {
		held.expires = now.Add(st.s.ttl)
		if resetAt.Before(held.expires) {
			b.pushAt, b.next = resetAt, held
		}
	}
	return out
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// earliest is the earlier of a and b, a zero time meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// forget drops b from the stream.
func (st *stream) forget(b *streamBucket) {
	delete(st.buckets, b.key)
	st.s.obs.Buckets(-1)
}

// limitVerdict returns what limit l, whose counter is t's slot, says of
// usage w: its failure mode when the store or the ledger failed;
// ALLOW_ALL in shadow mode (charged all the same); else the client's share
// of the limit as a token bucket, and when the window's budget is spent,
// reset > 0, the time until it admits again, during which the bucket is
// denied instead (see decide).
func (st *stream) limitVerdict(now time.Time, w *usage, l *rules.Limit, t *takeResult, slot int) (v verdict, reset time.Duration) {
	if t.failed(slot) {
		return st.failureVerdict(l), 0
	}
	if l.Shadow || st.s.shadow {
		return verdict{kind: KindAllowAll, ttl: st.s.ttl}, 0
	}
	c, res := &t.reqs[slot], t.res[slot]
	share, err := t.shares[t.ledgerAt[slot]].Share, t.shares[t.ledgerAt[slot]].Err
	if err != nil {
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			st.s.log.Debug("rlqs: ledger failed; applying the failure mode", zap.String("rule", l.Rule), zap.Error(err))
		}
		return st.failureVerdict(l), 0
	}
	if c.Remaining(res, now) == 0 {
		reset = spentFor(c, res, now)
	}
	w.b.recheckAt = earliest(w.b.recheckAt, share.Recheck)
	if share.Kept {
		return verdict{keep: true}, reset // Envoy's token bucket stands
	}
	if w.b.waiting(now, share) {
		w.b.recheckAt = earliest(w.b.recheckAt, w.b.waitUntil)
		return verdict{keep: true}, reset
	}
	return st.shareVerdict(share, w.b.held), reset
}

// waiting reports whether b, first reported periodically on this stream
// and sent nothing yet, should still be sent nothing at now: its share is
// capped below its target (Share.Recheck is set), so an assignment now
// would replace, with less, the one Envoy may hold from another stream.
func (b *streamBucket) waiting(now time.Time, share Share) bool {
	return !b.sent && now.Before(b.waitUntil) && !share.Recheck.IsZero()
}

// shareVerdict is a ledger's share as the verdict Envoy gets: its token
// bucket (Strategy, given held, the strategy the client holds), or
// DENY_ALL for a share too small to encode.
func (st *stream) shareVerdict(share Share, held *typev3.RateLimitStrategy) verdict {
	s := Strategy(share, held)
	if s.GetTokenBucket() == nil {
		return verdict{kind: KindDenyAll, ttl: st.s.ttl}
	}
	return verdict{kind: KindTokenBucket, strategy: s, ttl: st.s.ttl}
}

// recheckAll asks the ledger again, in one call, for the shares of the
// buckets whose recheckAt is due at now, with reports of no counts and no
// elapsed time: the room another client's decrease held is free by now,
// and the client need not wait for its next report (up to 5 s) to grow
// into it. It appends to actions the buckets' new assignments where a
// share changed (see recheck).
func (st *stream) recheckAll(ctx context.Context, now time.Time, actions []*rlqsv3.RateLimitQuotaResponse_BucketAction) []*rlqsv3.RateLimitQuotaResponse_BucketAction {
	var (
		due  []recheckDue
		reqs []Request
	)
	dom := st.s.counters.Rules().Domain(st.domain)
	for _, b := range st.buckets {
		if b.recheckAt.IsZero() || b.recheckAt.After(now) {
			continue
		}
		b.recheckAt = time.Time{}
		rule := b.match(dom, st.s.counters, st.domain)
		if len(rule.limits) == 0 {
			continue // the next report abandons the bucket
		}
		d := recheckDue{b: b, first: len(reqs)}
		for i, l := range rule.limits {
			if l.Unlimited || l.Shadow || st.s.shadow {
				continue // ALLOW_ALL, as at the report
			}
			reqs = append(reqs, Request{Key: rule.counters[i].Key, Fleet: fleetOf(l), Report: Report{Client: st.client}, TTL: st.s.ttl})
		}
		if len(reqs)-d.first == 1 && b.sent {
			// Quiet once Envoy holds an assignment: recheck sends a share
			// only if it changed, and then with a new TTL. Not with several
			// limits: one that changed would send, with a new TTL, the
			// assignment another one's unwritten share may decide.
			reqs[d.first].Quiet = true
		}
		due = append(due, d)
	}
	var res []Result
	if len(reqs) > 0 {
		res = st.s.ledger.Assign(ctx, now, reqs)
	}
	for i, d := range due {
		end := len(res)
		if i+1 < len(due) {
			end = due[i+1].first
		}
		if a := st.recheck(now, d.b, res[d.first:end]); a != nil {
			actions = append(actions, a)
		}
	}
	return actions
}

// recheckDue is a bucket being re-checked, and the index of its first
// request in the ledger call.
type recheckDue struct {
	b     *streamBucket
	first int
}

// recheck returns b's new assignment from the ledger's answers to its
// re-check, res, when a share changed; nil to send nothing. Nothing is
// charged, and the rules served now decide; a ledger that fails gets
// nothing here: the next report applies the failure modes. For a bucket a
// spent window denies, the new assignment is what the window's reset
// pushes (streamBucket.next).
func (st *stream) recheck(now time.Time, b *streamBucket, res []Result) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	out := verdict{kind: KindAllowAll, ttl: st.s.ttl}
	changed, waiting := !b.sent, false
	for _, r := range res {
		if r.Err != nil {
			b.recheckAt = time.Time{}
			return nil
		}
		share := r.Share
		changed = changed || share.Changed
		b.recheckAt = earliest(b.recheckAt, share.Recheck)
		waiting = waiting || b.waiting(now, share)
		if v := st.shareVerdict(share, b.held); v.stricter(&out) {
			out = v
		}
	}
	if waiting {
		b.recheckAt = earliest(b.recheckAt, b.waitUntil)
		return nil
	}
	if !changed {
		return nil
	}
	if b.pushAt.IsZero() && now.Before(b.spentUntil) {
		// A spent window denies the bucket: its DENY_ALL stays until the
		// reset, which then pushes this share if it is still in force.
		if b.spentUntil.Before(now.Add(st.s.ttl)) {
			b.pushAt = b.spentUntil
		} else {
			return nil
		}
	}
	if !b.pushAt.IsZero() {
		out.expires = now.Add(st.s.ttl)
		b.next = out
		return nil
	}
	a := b.send(&out, now)
	if a != nil {
		st.s.obs.Assignment(st.domainLabel(), out.kind)
	}
	return a
}

// fleetOf is what limit l allows the fleet: a token bucket rule's rate and
// burst (the algorithms that take a burst); for the windows and the
// sliding log, the window's rate with the small burst WindowFleet gives (an
// error term of their guarantee).
func fleetOf(l *rules.Limit) Fleet {
	if l.Algorithm.TakesBurst() {
		f := Fleet{Tokens: uint64(l.RequestsPerUnit), Period: l.Size, Burst: uint64(l.Burst)}
		if f.Tokens > 0 {
			f.Burst = max(f.Burst, 1)
		}
		return f
	}
	return WindowFleet(uint64(l.RequestsPerUnit), l.Size)
}

// spentFor returns how long a counter with no room left denies: to the end
// of its window for the windows, until one hit fits again for a token
// bucket or a sliding log; at least 1 s, the least TTL Envoy applies.
func spentFor(c *window.Counter, res window.Result, now time.Time) time.Duration {
	wait := c.RetryAfter(res, now)
	if c.Algorithm.Windowed() || wait <= 0 {
		wait = max(wait, c.Reset(res, now))
	}
	if !c.Algorithm.Windowed() && c.Capacity() > 0 {
		// Until one hit fits, not until the whole bucket or log is back.
		wait = min(wait, c.Size/time.Duration(max(c.Limit, 1)))
	}
	return max(wait, time.Second)
}

// wholeSecondsUp rounds d up to whole seconds: Envoy 1.40 reads only the
// seconds of a TTL.
func wholeSecondsUp(d time.Duration) time.Duration {
	return (d + time.Second - 1).Truncate(time.Second)
}

// failureVerdict is l's failure mode as a verdict: allow → ALLOW_ALL, deny
// → DENY_ALL, error → nothing sent, so Envoy keeps its last assignment
// until its TTL and then applies expired_assignment_behavior.
func (st *stream) failureVerdict(l *rules.Limit) verdict {
	switch l.FailureMode {
	case rules.FailAllow:
		return verdict{kind: KindAllowAll, ttl: st.s.ttl, failed: true}
	case rules.FailDeny:
		return verdict{kind: KindDenyAll, ttl: st.s.ttl, failed: true}
	}
	return verdict{keep: true, failed: true}
}
