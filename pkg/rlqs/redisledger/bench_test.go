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
// same bucket, against a local redis-server, through one replica's Ledger
// or through two in turn: the round trips per Assign (1 when no other
// replica wrote the bucket since, 2 when one did) and the Go side's cost.
func BenchmarkAssign(b *testing.B) {
	for _, replicas := range []int{1, 2} {
		for _, clients := range []int{1, 10, 100} {
			b.Run(fmt.Sprintf("replicas=%d/clients=%d", replicas, clients), func(b *testing.B) {
				srv := redistest.Start(b)
				ls := make([]*Ledger, replicas)
				for i := range ls {
					ls[i] = New(srv.BoundedClient(b), Options{})
				}
				ctx := context.Background()
				f := rlqs.Fleet{Tokens: 1000, Period: time.Second, Burst: 1000}
				now := time.Now()
				ids := make([]string, clients)
				for i := range ids {
					ids[i] = fmt.Sprintf("envoy-%d", i)
				}
				assign := func(i int) {
					r := rlqs.Report{Client: ids[i%clients], Allowed: 100, Denied: 10, Elapsed: 5 * time.Second}
					if _, err := ls[i%replicas].Assign(ctx, now, "bucket", f, r, time.Minute); err != nil {
						b.Fatal(err)
					}
				}
				for i := range max(clients, replicas) {
					assign(i)
				}
				var start uint64
				for _, l := range ls {
					start += l.RoundTrips()
				}
				i := 0
				b.ReportAllocs()
				for b.Loop() {
					assign(i)
					i++
				}
				var end uint64
				for _, l := range ls {
					end += l.RoundTrips()
				}
				b.ReportMetric(float64(end-start)/float64(i), "roundtrips/op")
			})
		}
	}
}
