package redisstore

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// TestTakeSpans: with a tracer, every Take is one client span, the child of
// its caller's; a batched Take's span carries its batch's size and round
// trip, and a failed Take's span an error.
func TestTakeSpans(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	for _, batched := range []bool{false, true} {
		t.Run("batched="+strconv.FormatBool(batched), func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			tracer := tp.Tracer("test")
			s := New(client, Options{Tracer: tracer})
			if batched {
				s = mustBatched(t, client, Options{Tracer: tracer}, BatchOptions{})
			}
			const n = 20
			parents := make([]trace.SpanContext, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					ctx, parent := tracer.Start(context.Background(), "decision")
					defer parent.End()
					parents[i] = parent.SpanContext()
					r := storetest.Req("span"+strconv.FormatBool(batched)+strconv.Itoa(i), 5, 1)
					if _, err := s.Take(ctx, storetest.T0, []window.Counter{r, r}, make([]window.Result, 2)); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			takes := map[trace.SpanID]sdktrace.ReadOnlySpan{}
			for _, sp := range rec.Ended() {
				if sp.Name() == takeSpanName {
					takes[sp.Parent().SpanID()] = sp
				}
			}
			for i, p := range parents {
				sp, ok := takes[p.SpanID()]
				if !ok {
					t.Errorf("Take %d: no %q span under its caller's", i, takeSpanName)
					continue
				}
				if sp.SpanKind() != trace.SpanKindClient || spanAttr(sp, "ratelimit.counters") != "2" || spanAttr(sp, "db.system.name") != "redis" {
					t.Errorf("Take %d: span kind %v, attributes %v; want client, 2 counters, redis", i, sp.SpanKind(), sp.Attributes())
				}
				size, _ := strconv.Atoi(spanAttr(sp, "ratelimit.redis.batch_size"))
				rt, _ := strconv.ParseFloat(spanAttr(sp, "ratelimit.redis.round_trip_ms"), 64)
				if batched && (size < 1 || size > n || rt <= 0 || spanAttr(sp, "ratelimit.redis.queued_ms") == "") {
					t.Errorf("Take %d: batch size %d, round trip %vms, queued %q; want 1 to %d, > 0, set", i, size, rt, spanAttr(sp, "ratelimit.redis.queued_ms"), n)
				}
				if !batched && size != 0 {
					t.Errorf("Take %d: unbatched, batch size %d", i, size)
				}
			}

			// A closed batched store fails; an unbatched one on a dead
			// context does too.
			s.Close()
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			rec2 := len(rec.Ended())
			if _, err := s.Take(ctx, storetest.T0, []window.Counter{storetest.Req("dead", 5, 1)}, make([]window.Result, 1)); !errors.Is(err, window.ErrStore) {
				t.Fatalf("Take after Close or on a cancelled context = %v, want a store error", err)
			}
			ended := rec.Ended()[rec2:]
			if len(ended) != 1 || ended[0].Status().Code != codes.Error || len(ended[0].Events()) == 0 {
				t.Errorf("failed Take: %d spans; want one with an Error status and the error recorded", len(ended))
			}
		})
	}
}

func spanAttr(s sdktrace.ReadOnlySpan, k attribute.Key) string {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value.String()
		}
	}
	return ""
}
