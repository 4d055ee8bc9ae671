package rlqs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/ledgertest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

func TestMemoryTable(t *testing.T) {
	t.Parallel()
	ledgertest.Table(t, func(*testing.T) rlqs.Ledger { return rlqs.NewMemory(rlqs.Policy{}) })
}

func TestMemoryBatch(t *testing.T) {
	t.Parallel()
	ledgertest.Batch(t, func(*testing.T) rlqs.Ledger { return rlqs.NewMemory(rlqs.Policy{}) })
}

func TestMemoryConcurrentBatches(t *testing.T) {
	t.Parallel()
	ledgertest.ConcurrentBatches(t, 8, 20, 10, rlqs.NewMemory(rlqs.Policy{}))
}

func TestMemoryConcurrent(t *testing.T) {
	t.Parallel()
	ledgertest.Concurrent(t, 16, 50, rlqs.NewMemory(rlqs.Policy{}))
}

// BenchmarkMemoryAssign is one report of one bucket among clients others.
func BenchmarkMemoryAssign(b *testing.B) {
	for _, clients := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			m := rlqs.NewMemory(rlqs.Policy{})
			ctx := context.Background()
			f := rlqs.Fleet{Tokens: 1000, Period: time.Second, Burst: 1000}
			ids := make([]string, clients)
			for i := range ids {
				ids[i] = fmt.Sprintf("envoy-%d", i)
			}
			now := time.Now()
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				r := rlqs.Report{Client: ids[i%clients], Allowed: 100, Denied: 10, Elapsed: 5 * time.Second}
				if _, err := rlqs.AssignOne(ctx, m, now, "bucket", f, r, time.Minute); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
