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
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

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
	o      options
	id     int
	share  float64 // of the fleet's demand per bucket
	ids    []*rlqspb.BucketId
	tally  *tally
	span   span
	window time.Duration

	mu       sync.Mutex // guards what the receiver and the ticker share: buckets
	buckets  []edgeBucket
	offered  []float64 // fractional demand carried to the next tick
	allowed  []uint64  // since the last report
	denied   []uint64
	admitted map[winKey]uint64 // owned by the ticker
}

func newEnvoy(o options, id int, share float64, t *tally, sp span) *envoy {
	e := &envoy{o: o, id: id, share: share, tally: t, span: sp, window: o.window,
		buckets: make([]edgeBucket, o.buckets), offered: make([]float64, o.buckets),
		allowed: make([]uint64, o.buckets), denied: make([]uint64, o.buckets), admitted: map[winKey]uint64{}}
	for j := range o.buckets {
		e.ids = append(e.ids, &rlqspb.BucketId{Bucket: map[string]string{o.key: bucketValue(j)}})
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
	sleepUntil(ctx, start)
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
		sleepUntil(ctx, time.Now().Add(100*time.Millisecond))
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
	if err := e.report(st, lastReport, 0); err != nil { // the subscription: what happened before it, at elapsed 0
		return err
	}
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
			if !now.Before(nextReport) {
				if err := e.report(st, now, now.Sub(lastReport)); err != nil {
					return err
				}
				lastReport, nextReport = now, nextReport.Add(e.o.interval)
			}
		}
	}
}

// decide offers every bucket its demand over dt and decides it.
func (e *envoy) decide(now time.Time, dt time.Duration) {
	win := window.At(now, e.window).Start
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
		ok := e.buckets[j].Decide(now, n)
		e.allowed[j] += ok
		e.denied[j] += n - ok
		e.admitted[winKey{j, win}] += ok
		offered += n
		admitted += ok
	}
	if in {
		e.tally.offered.Add(offered)
		e.tally.admitted.Add(admitted)
	}
}

// report sends one usage report of every bucket, covering elapsed: truncated to whole seconds as Envoy 1.40
// does when the interval is at least a second, else (a compressed interval) as it is.
func (e *envoy) report(st grpc.BidiStreamingClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse],
	now time.Time, elapsed time.Duration) error {
	if e.o.interval >= time.Second {
		elapsed = elapsed.Truncate(time.Second)
	}
	msg := &rlqspb.RateLimitQuotaUsageReports{Domain: e.o.domain,
		BucketQuotaUsages: make([]*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage, len(e.ids))}
	e.mu.Lock()
	for j, id := range e.ids {
		msg.BucketQuotaUsages[j] = &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: id,
			TimeElapsed: durationpb.New(elapsed), NumRequestsAllowed: e.allowed[j], NumRequestsDenied: e.denied[j]}
		e.allowed[j], e.denied[j] = 0, 0
	}
	e.mu.Unlock()
	if err := st.Send(msg); err != nil {
		return err
	}
	if e.span.holds(now) {
		e.tally.reports.Add(1)
		e.tally.usages.Add(uint64(len(e.ids)))
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
			kind := e.buckets[j].Apply(now, a)
			e.mu.Unlock()
			if in {
				e.tally.count(kind)
			}
		}
	}
}

func (t *tally) count(k actionKind) {
	switch k {
	case actionTokens:
		t.assignments.Add(1)
		t.tokenBucket.Add(1)
	case actionAllow:
		t.assignments.Add(1)
		t.allowAll.Add(1)
	case actionDeny:
		t.assignments.Add(1)
		t.denyAll.Add(1)
	case actionAbandon:
		t.abandons.Add(1)
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
