package redisstore

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// What a span means here. A Take is one span, "redis take", of client
// kind, from the moment it is asked to the moment its answer is read: for
// a batched store that is its wait for a worker plus the script call it
// shared, so a slow decision shows where its time went. The script call
// itself, which a batch shares among up to MaxBatch Takes of as many
// traces, has no span of its own (it would belong to no single trace);
// each Take's span carries the call's size and round trip instead:
//
//   - ratelimit.counters: the Take's counters;
//   - ratelimit.redis.batch_size: requests in the script call it went in
//     (batched stores only);
//   - ratelimit.redis.queued_ms: how long it waited for the call to be
//     sent (batched stores only);
//   - ratelimit.redis.round_trip_ms: how long the call took (batched
//     stores only; unbatched, the span is the call);
//   - ratelimit.redis.slots: hash slots, and so parallel script calls, of
//     a cluster Take over several.
//
// A Take that fails records the error and an Error status.

const takeSpanName = "redis take"

var (
	attrDBSystem  = attribute.String("db.system.name", "redis")
	attrOperation = attribute.String("db.operation.name", "EVALSHA")
)

const (
	keyCounters  = attribute.Key("ratelimit.counters")
	keyBatchSize = attribute.Key("ratelimit.redis.batch_size")
	keyQueued    = attribute.Key("ratelimit.redis.queued_ms")
	keyRoundTrip = attribute.Key("ratelimit.redis.round_trip_ms")
	keySlots     = attribute.Key("ratelimit.redis.slots")
)

// takeTrace is what a traced Take learns about the script calls it went in.
type takeTrace struct {
	batch     int // requests in the batch's script call; 0 unbatched
	queued    time.Duration
	roundTrip time.Duration
	slots     int // hash slots of a cluster Take over several; else 0
}

// tracedTake is take inside a span (see above).
func (s *Store) tracedTake(ctx context.Context, now time.Time, reqs []window.Counter, res []window.Result) (bool, error) {
	ctx, span := s.tracer.Start(ctx, takeSpanName, trace.WithSpanKind(trace.SpanKindClient))
	var info takeTrace
	allowed, err := s.take(ctx, now, reqs, res, &info)
	if span.IsRecording() {
		span.SetAttributes(attrDBSystem, attrOperation, keyCounters.Int(len(reqs)))
		if info.batch > 0 {
			span.SetAttributes(keyBatchSize.Int(info.batch), keyQueued.Float64(ms(info.queued)), keyRoundTrip.Float64(ms(info.roundTrip)))
		}
		if info.slots > 0 {
			span.SetAttributes(keySlots.Int(info.slots))
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
	return allowed, err
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
