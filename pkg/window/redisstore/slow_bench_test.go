package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/faultproxy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// BenchmarkSlowRedis measures which answers come from Redis when Redis is
// some way off: a fault proxy adds latency each way, 50 callers each give
// every Take a 1 s deadline (as an Envoy filter timeout of 1 s would), and
// the batched store has the sidecar's defaults (Timeout 15 ms, one batch in
// flight). "cap=15ms" sets MaxTimeout 15 ms: the store as it was before it
// followed deadlines, failing every call that Redis does not answer in
// 15 ms. It reports the share of Takes decided by Redis in %redis, and the
// median and 99th percentile of a Take in p50-ms and p99-ms.
func BenchmarkSlowRedis(b *testing.B) {
	srv := redistest.Start(b)
	for _, latency := range []time.Duration{0, 2 * time.Millisecond, 10 * time.Millisecond} {
		for _, maxTimeout := range []time.Duration{15 * time.Millisecond, 0} {
			name := fmt.Sprintf("latency=%v/cap=%v", latency, maxTimeout)
			if maxTimeout == 0 {
				name = fmt.Sprintf("latency=%v/cap=none", latency)
			}
			b.Run(name, func(b *testing.B) {
				benchSlowRedis(b, srv.Addr, latency, maxTimeout)
			})
		}
	}
}

func benchSlowRedis(b *testing.B, addr string, latency, maxTimeout time.Duration) {
	p, err := faultproxy.Start(b.Context(), addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close() })
	client := boundedClient(b, p.Addr())
	s := mustBatched(b, client, Options{Timeout: 15 * time.Millisecond, MaxTimeout: maxTimeout}, BatchOptions{})
	b.Cleanup(func() { _ = s.Close() })
	if err := s.Ping(context.Background()); err != nil {
		b.Fatal(err)
	}
	p.Set(faultproxy.Fault{Latency: latency})
	var decided atomic.Int64
	var mu sync.Mutex
	var took []time.Duration
	b.ReportAllocs()
	b.SetParallelism(max(1, 50/runtime.GOMAXPROCS(0))) // about 50 callers
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		res := make([]window.Result, 1)
		var mine []time.Duration
		for pb.Next() {
			req := storetest.Req("slow"+strconv.Itoa(rand.IntN(1000)), 1<<30, 1)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			start := time.Now()
			_, err := s.Take(ctx, storetest.T0, []window.Counter{req}, res)
			mine = append(mine, time.Since(start))
			cancel()
			if err == nil {
				decided.Add(1)
			}
		}
		mu.Lock()
		took = append(took, mine...)
		mu.Unlock()
	})
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(100*float64(decided.Load())/float64(b.N), "%redis")
	b.ReportMetric(float64(took[len(took)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100])/1e6, "p99-ms")
}
