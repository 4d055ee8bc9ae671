package main

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window/redisstore"
)

// BenchmarkShardCeiling pushes the sidecar's batched script calls at one redis-server from many goroutines,
// so that Redis's one thread is as busy as this machine lets it be, and reports Redis's CPU per decision there
// (redis-µs/decision), how busy its core was (redis-core), and the decisions one fully busy core would take
// (ceiling-decisions/s = 1e6 / redis-µs/decision): the capacity model's shard ceiling. The requests are the
// harness's: one descriptor over 1,000 keys with room (fixed and sliding), and half of them on 10 keys (hot).
func BenchmarkShardCeiling(b *testing.B) {
	for _, bc := range []struct {
		name string
		alg  window.Algorithm
		key  func(i int) string
	}{
		{"fixed", window.FixedWindow, func(i int) string { return "k" + strconv.Itoa(i%1000) }},
		{"sliding", window.SlidingWindow, func(i int) string { return "k" + strconv.Itoa(i%1000) }},
		{"hotkeys", window.FixedWindow, func(i int) string {
			if i%2 == 0 {
				return "h" + strconv.Itoa(i/2%10)
			}
			return "k" + strconv.Itoa(i%1000)
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			srv := redistest.Start(b)
			client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, Protocol: 2, PoolSize: 16})
			defer client.Close()
			// Several workers keep several batches in flight, so Redis never waits for this process.
			store, err := redisstore.NewBatched(client, redisstore.Options{Timeout: 5 * time.Second},
				redisstore.BatchOptions{Workers: 4})
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			ctx := context.Background()
			if err := store.Ping(ctx); err != nil {
				b.Fatal(err)
			}
			keys := make([]string, 1000)
			for i := range keys {
				k := window.AppendKeyHead(nil, "bench:", "bench")
				keys[i] = string(window.AppendKeyEnd(window.AppendKeyEntry(k, "api_key", bc.key(i))))
			}
			cpu0 := redisCPU(b, client)
			var next atomic.Int64
			start := time.Now()
			b.ReportAllocs()
			b.SetParallelism(64)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				reqs := make([]window.Counter, 1)
				res := make([]window.Result, 1)
				for pb.Next() {
					i := next.Add(1)
					reqs[0] = window.Counter{Key: keys[i%int64(len(keys))], Limit: 1e9, Size: time.Second, Hits: 1,
						Algorithm: bc.alg}
					if _, err := store.Take(ctx, time.Now(), reqs, res); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			wall := time.Since(start).Seconds()
			used := redisCPU(b, client) - cpu0
			us := used * 1e6 / float64(b.N)
			b.ReportMetric(us, "redis-µs/decision")
			b.ReportMetric(used/wall, "redis-core")
			b.ReportMetric(1e6/us, "ceiling-decisions/s")
			b.ReportMetric(float64(store.RoundTrips())/float64(b.N), "round-trips/decision")
		})
	}
}

// redisCPU returns the server's used_cpu_sys + used_cpu_user, in seconds.
func redisCPU(b *testing.B, c *redis.Client) float64 {
	s, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for line := range strings.Lines(s) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				b.Fatal(err)
			}
			sum += v
		}
	}
	return sum
}
