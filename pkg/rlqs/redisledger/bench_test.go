package redisledger

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// BenchmarkAssign is one report of one bucket among clients others of the
// same bucket, against a local redis-server: the round trips per Assign
// (2 without conflicts) and the Go side's cost.
func BenchmarkAssign(b *testing.B) {
	for _, clients := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			l := New(redistest.Start(b).BoundedClient(b), Options{})
			ctx := context.Background()
			f := rlqs.Fleet{Tokens: 1000, Period: time.Second, Burst: 1000}
			now := time.Now()
			for i := range clients {
				r := rlqs.Report{Client: fmt.Sprintf("envoy-%d", i), Allowed: 100, Denied: 10, Elapsed: 5 * time.Second}
				if _, err := l.Assign(ctx, now, "bucket", f, r, time.Minute); err != nil {
					b.Fatal(err)
				}
			}
			start := l.RoundTrips()
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				r := rlqs.Report{Client: fmt.Sprintf("envoy-%d", i%clients), Allowed: 100, Denied: 10, Elapsed: 5 * time.Second}
				if _, err := l.Assign(ctx, now, "bucket", f, r, time.Minute); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(l.RoundTrips()-start)/float64(i), "roundtrips/op")
		})
	}
}
