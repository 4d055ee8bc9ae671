package main

import (
	"context"
	"errors"
	"io"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/local"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/envoyrlqs"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// tally is what every stream counts inside the measured interval, shared.
type tally struct {
	reports, usages, responses, errors                    atomic.Uint64
	assignments, tokenBucket, denyAll, allowAll, abandons atomic.Uint64
	offered, admitted                                     atomic.Uint64
	firstError                                            atomic.Pointer[string]
}

func (t *tally) fail(err error) {
	t.errors.Add(1)
	s := err.Error()
	t.firstError.CompareAndSwap(nil, &s)
}

// span is the measured interval; a stream counts what happens inside it.
type span struct{ start, end time.Time }

func (s span) holds(t time.Time) bool { return !t.Before(s.start) && t.Before(s.end) }

// winKey is one bucket's rule window, for the fleet's admitted count per window.
type winKey struct {
	bucket int
	start  int64 // Unix ms
}

// envoy is one simulated Envoy: one stream reporting every bucket, its filter's state per bucket, and the
// demand it sees (share of the fleet's).
type envoy struct {
	o     options
	share float64 // of the fleet's demand per bucket
	ids   []*rlqspb.BucketId
	tally *tally
	span  span

	mu       sync.Mutex // guards what the receiver and the ticker share: buckets
	buckets  []*envoyrlqs.Bucket
	offered  []float64         // fractional demand carried to the next tick
	admitted map[winKey]uint64 // owned by the ticker
}

// settings are those of issue 25's example Envoy config: ALLOW_ALL before the first assignment, and no
// expired_assignment_behavior, so ALLOW_ALL again once an assignment's TTL has run out (the sidecar answers
// every report, so with it up an assignment never runs out).
var settings = envoyrlqs.Settings{NoAssignment: envoyrlqs.Blanket(typev3.RateLimitStrategy_ALLOW_ALL)}

func newEnvoy(o options, share float64, t *tally, sp span) *envoy {
	e := &envoy{o: o, share: share, tally: t, span: sp,
		buckets: make([]*envoyrlqs.Bucket, o.buckets), offered: make([]float64, o.buckets), admitted: map[winKey]uint64{}}
	for j := range o.buckets {
		e.ids = append(e.ids, &rlqspb.BucketId{Bucket: map[string]string{o.key: bucketValue(j)}})
		b, err := envoyrlqs.New(settings)
		if err != nil {
			panic(err) // settings is a blanket rule: New refuses only a token bucket
		}
		e.buckets[j] = b
	}
	return e
}

// bucketValue is bucket j's value of the bucket_id key; index parses it back.
func bucketValue(j int) string { return "b" + strconv.Itoa(j) }

func bucketIndex(v string, n int) (int, bool) {
	if len(v) < 2 || v[0] != 'b' {
		return 0, false
	}
	j, err := strconv.Atoi(v[1:])
	return j, err == nil && j >= 0 && j < n
}

// run drives the Envoy until ctx ends: it opens a stream on cc (again after the server ends one, as Envoy
// reconnects), decides its demand every tick, and reports every interval, the first report at once (Envoy
// reports a new bucket on its first request). start staggers the Envoys over one interval, as real ones are.
func (e *envoy) run(ctx context.Context, cc *grpc.ClientConn, start time.Time) {
	local.SleepUntil(ctx, start)
	client := rlqspb.NewRateLimitQuotaServiceClient(cc)
	last := time.Now()
	for ctx.Err() == nil {
		err := e.stream(ctx, client, &last)
		if ctx.Err() != nil {
			return
		}
		if e.span.holds(time.Now()) {
			e.tally.fail(err)
		}
		local.SleepUntil(ctx, time.Now().Add(100*time.Millisecond))
	}
}

// stream runs one stream until it fails or ctx ends; last is the time of the last tick, kept across streams.
func (e *envoy) stream(ctx context.Context, client rlqspb.RateLimitQuotaServiceClient, last *time.Time) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := client.StreamRateLimitQuotas(ctx)
	if err != nil {
		return err
	}
	recvErr := make(chan error, 1)
	go func() { recvErr <- e.receive(st) }()
	defer func() { cancel(); <-recvErr }()

	tick := time.NewTicker(e.o.tick)
	defer tick.Stop()
	lastReport := time.Now()
	nextReport := lastReport.Add(e.o.interval)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-recvErr:
			recvErr <- err // for the deferred wait
			return err
		case now := <-tick.C:
			e.decide(now, now.Sub(*last))
			*last = now
			// A bucket's first request sends its report at once (Envoy's subscription).
			if err := e.report(st, now, (*envoyrlqs.Bucket).Subscription); err != nil {
				return err
			}
			if !now.Before(nextReport) {
				elapsed := now.Sub(lastReport)
				periodic := func(b *envoyrlqs.Bucket) (envoyrlqs.Usage, bool) {
					u, ok := b.Usage(now)
					if e.o.interval < time.Second {
						// A compressed interval: Envoy's whole seconds would be 0; send what elapsed.
						u.Elapsed = elapsed
					}
					return u, ok
				}
				if err := e.report(st, now, periodic); err != nil {
					return err
				}
				lastReport, nextReport = now, nextReport.Add(e.o.interval)
			}
		}
	}
}

// decide offers every bucket its demand over dt and decides it.
func (e *envoy) decide(now time.Time, dt time.Duration) {
	win := window.At(now, e.o.window).Start
	in := e.span.holds(now)
	var offered, admitted uint64
	e.mu.Lock()
	defer e.mu.Unlock()
	for j := range e.buckets {
		e.offered[j] += e.o.demand * e.share * dt.Seconds()
		n := uint64(e.offered[j])
		e.offered[j] -= float64(n)
		if n == 0 {
			continue
		}
		var ok uint64
		for range n {
			if e.buckets[j].Decide(now) {
				ok++
			}
		}
		e.admitted[winKey{j, win}] += ok
		offered += n
		admitted += ok
	}
	if in {
		e.tally.offered.Add(offered)
		e.tally.admitted.Add(admitted)
	}
}

// report sends one usage report with what usage returns for each bucket that has one (none: no report), with
// the domain, as Envoy 1.40 sends every message.
func (e *envoy) report(st grpc.BidiStreamingClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse],
	now time.Time, usage func(*envoyrlqs.Bucket) (envoyrlqs.Usage, bool)) error {
	msg := &rlqspb.RateLimitQuotaUsageReports{Domain: e.o.domain}
	e.mu.Lock()
	for j, b := range e.buckets {
		u, ok := usage(b)
		if !ok {
			continue
		}
		msg.BucketQuotaUsages = append(msg.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: e.ids[j], TimeElapsed: durationpb.New(u.Elapsed), NumRequestsAllowed: u.Allowed,
			NumRequestsDenied: u.Denied})
	}
	e.mu.Unlock()
	if len(msg.BucketQuotaUsages) == 0 {
		return nil
	}
	if err := st.Send(msg); err != nil {
		return err
	}
	if e.span.holds(now) {
		e.tally.reports.Add(1)
		e.tally.usages.Add(uint64(len(msg.BucketQuotaUsages)))
	}
	return nil
}

// receive applies the server's bucket actions until the stream ends.
func (e *envoy) receive(st grpc.BidiStreamingClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]) error {
	for {
		resp, err := st.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("server ended the stream")
			}
			return err
		}
		now := time.Now()
		in := e.span.holds(now)
		if in {
			e.tally.responses.Add(1)
		}
		for _, a := range resp.GetBucketAction() {
			j, ok := bucketIndex(a.GetBucketId().GetBucket()[e.o.key], len(e.buckets))
			if !ok {
				continue
			}
			e.mu.Lock()
			e.buckets[j].Apply(now, a)
			e.mu.Unlock()
			if in {
				e.tally.count(a)
			}
		}
	}
}

// count counts one bucket action by what it is.
func (t *tally) count(a *rlqspb.RateLimitQuotaResponse_BucketAction) {
	if a.GetAbandonAction() != nil {
		t.abandons.Add(1)
		return
	}
	qa := a.GetQuotaAssignmentAction()
	if qa == nil {
		return
	}
	t.assignments.Add(1)
	switch s := qa.GetRateLimitStrategy(); {
	case s.GetTokenBucket() != nil:
		t.tokenBucket.Add(1)
	case s.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL && s.GetStrategy() != nil:
		t.denyAll.Add(1)
	case s.GetRequestsPerTimeUnit() == nil:
		t.allowAll.Add(1) // blanket ALLOW_ALL, or no strategy (allow all)
	}
}

// shares splits the fleet's demand over n Envoys by Zipf's law with exponent skew (0: evenly), the first the
// busiest.
func shares(n int, skew float64) []float64 {
	w := make([]float64, n)
	var sum float64
	for i := range w {
		w[i] = math.Pow(float64(i+1), -skew)
		sum += w[i]
	}
	for i := range w {
		w[i] /= sum
	}
	return w
}
