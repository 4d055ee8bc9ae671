package envoyrls

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window/redisstore"
)

// benchRulesFile holds the rules of the load harness (bench/harness), so the
// benchmark and the harness measure the same workload.
const benchRulesFile = "../../bench/harness/bench.yaml"

// roundTripper is a store that counts its Redis calls.
type roundTripper interface{ RoundTrips() uint64 }

// BenchmarkShouldRateLimit measures one decision on the hot path, allowed,
// over 1,000 API keys: allocations per decision and, for Redis, round trips
// per decision (rt/op).
func BenchmarkShouldRateLimit(b *testing.B) { benchShouldRateLimit(b, nil) }

// BenchmarkShouldRateLimitTraced is BenchmarkShouldRateLimit with tracing
// on, its spans batched to an exporter that drops them: what making the
// spans costs, with every trace sampled and with none (rate 0).
func BenchmarkShouldRateLimitTraced(b *testing.B) {
	for _, sm := range []struct {
		name    string
		sampler sdktrace.Sampler
	}{{"sampled", sdktrace.AlwaysSample()}, {"unsampled", sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0))}} {
		b.Run(sm.name, func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sm.sampler), sdktrace.WithBatcher(discardExporter{}))
			b.Cleanup(func() { tp.Shutdown(context.Background()) })
			benchShouldRateLimit(b, tp.Tracer("bench"))
		})
	}
}

// discardExporter drops every span.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// benchStoreOptions are the Redis stores' options in every benchmark: a
// generous timeout, since 50 callers on a busy machine can wait longer than
// the default, and a benchmark must not fail for it; tracer may be nil.
func benchStoreOptions(tracer trace.Tracer) redisstore.Options {
	return redisstore.Options{Tracer: tracer, Timeout: 5 * time.Second}
}

// benchShouldRateLimit runs BenchmarkShouldRateLimit's cases, with tracer
// (nil for none) handed to the server and the Redis stores.
func benchShouldRateLimit(b *testing.B, tracer trace.Tracer) {
	rules, err := rules.Load(benchRulesFile)
	if err != nil {
		b.Fatal(err)
	}
	stores := []struct {
		name string
		make func(b *testing.B) window.Store
	}{
		{"memory", func(b *testing.B) window.Store { return window.NewMemory() }},
		{"redis", func(b *testing.B) window.Store {
			s := redisstore.New(redistest.Start(b).Client(b), benchStoreOptions(tracer))
			if err := s.Ping(context.Background()); err != nil {
				b.Fatal(err)
			}
			return s
		}},
		{"redis-batched", func(b *testing.B) window.Store {
			s, err := redisstore.NewBatched(redistest.Start(b).Client(b), benchStoreOptions(tracer), redisstore.BatchOptions{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			if err := s.Ping(context.Background()); err != nil {
				b.Fatal(err)
			}
			return s
		}},
		{"cluster", func(b *testing.B) window.Store { return clusterStore(b, tracer, false) }},
		{"cluster-batched", func(b *testing.B) window.Store { return clusterStore(b, tracer, true) }},
	}
	for _, st := range stores {
		for _, n := range []int{1, 3} {
			b.Run(st.name+"/"+strconv.Itoa(n)+"desc", func(b *testing.B) {
				store := st.make(b)
				srv, err := NewServer(Options{Store: store, Rules: rules, Tracer: tracer})
				if err != nil {
					b.Fatal(err)
				}
				reqs := make([]*rlsv3.RateLimitRequest, 1000)
				for i := range reqs {
					key := "k" + strconv.Itoa(i)
					ds := []*rlv3.RateLimitDescriptor{desc("api_key", key)}
					if n == 3 {
						ds = append(ds, desc("remote_address", "10.0.0."+strconv.Itoa(i%250)), desc("api_key", key, "path", "/p"+strconv.Itoa(i%10)))
					}
					reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: ds}
				}
				var before uint64
				rt, counts := store.(roundTripper)
				if counts {
					before = rt.RoundTrips()
				}
				var i atomic.Int64
				// 50 callers at once, as Envoy's filters and the load harness
				// send them: batching needs concurrency to coalesce.
				b.SetParallelism(max(1, 50/runtime.GOMAXPROCS(0)))
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					ctx := context.Background()
					for pb.Next() {
						resp, err := srv.ShouldRateLimit(ctx, reqs[i.Add(1)%int64(len(reqs))])
						if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
							b.Errorf("ShouldRateLimit = %v, %v", resp.GetOverallCode(), err)
							return
						}
					}
				})
				if counts {
					b.ReportMetric(float64(rt.RoundTrips()-before)/float64(b.N), "rt/op")
				}
			})
		}
	}
}

// clusterStore returns a store over a new 3-master Redis Cluster, batched
// or not, its script loaded. Its rt/op counts one round trip per node a
// call or a batch's pipeline reaches.
func clusterStore(b *testing.B, tracer trace.Tracer, batched bool) window.Store {
	c := redistest.StartCluster(b, 3)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, Protocol: 2, MaxRetries: -1, ContextTimeoutEnabled: true})
	b.Cleanup(func() { client.Close() })
	o := benchStoreOptions(tracer)
	s := redisstore.New(client, o)
	if batched {
		var err error
		if s, err = redisstore.NewBatched(client, o, redisstore.BatchOptions{}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
	}
	if err := s.Ping(context.Background()); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkShouldRateLimitHotKey measures a denial of scenario (b): one key
// far over its limit (10 an hour in the bench rules), answered by the
// over-limit cache with the 429 its limit last built, so it reports the
// allocations of the denial path (rt/op stays 0: no store call).
func BenchmarkShouldRateLimitHotKey(b *testing.B) {
	rules, err := rules.Load(benchRulesFile)
	if err != nil {
		b.Fatal(err)
	}
	inner := &takeCounter{Store: window.NewMemory()}
	cache := window.NewOverLimitCache(inner)
	// A fixed clock: a run that crossed the hour would be allowed 10 again.
	now := time.UnixMilli(1_763_800_020_000)
	srv, err := NewServer(Options{Store: cache, Rules: rules, Now: func() time.Time { return now }})
	if err != nil {
		b.Fatal(err)
	}
	req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{desc("api_key", "hot")}}
	ctx := context.Background()
	for range 11 { // the 10 allowed, then the first denial fills the cache
		if _, err := srv.ShouldRateLimit(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	calls := inner.calls.Load()
	b.SetParallelism(max(1, 50/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := srv.ShouldRateLimit(ctx, req)
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || len(resp.RawBody) == 0 {
				b.Errorf("ShouldRateLimit = %v, %d body bytes, %v", resp.GetOverallCode(), len(resp.GetRawBody()), err)
				return
			}
		}
	})
	if got := inner.calls.Load() - calls; got != 0 {
		b.Errorf("%d of %d denials reached the store, not the over-limit cache", got, b.N)
	}
}

// takeCounter counts the Takes that reach the store it wraps.
type takeCounter struct {
	window.Store
	calls atomic.Int64
}

func (c *takeCounter) Take(ctx context.Context, now time.Time, reqs []window.Counter, res []window.Result) (bool, error) {
	c.calls.Add(1)
	return c.Store.Take(ctx, now, reqs, res)
}

// BenchmarkShouldRateLimitOneFull measures denials of requests of 2 or 3
// descriptors of which one (api_key=hot, 10 an hour in the bench rules) is
// full and the others have room: with the over-limit cache and without, so
// the costs of the cache's answer for such requests can be compared. It
// reports round trips (rt/op), Redis CPU (redis-cpu-us/op, from INFO cpu)
// and this process's CPU (cpu-ns/op, the server without gRPC) per decision.
func BenchmarkShouldRateLimitOneFull(b *testing.B) {
	rules, err := rules.Load(benchRulesFile)
	if err != nil {
		b.Fatal(err)
	}
	for _, batched := range []bool{false, true} {
		for _, cached := range []bool{false, true} {
			for _, n := range []int{2, 3} {
				name := "redis"
				if batched {
					name += "-batched"
				}
				if cached {
					name += "/cache"
				} else {
					name += "/nocache"
				}
				b.Run(name+"/"+strconv.Itoa(n)+"desc", func(b *testing.B) {
					benchOneFull(b, rules, batched, cached, n)
				})
			}
		}
	}
}

func benchOneFull(b *testing.B, rs *rules.Set, batched, cached bool, n int) {
	srv := redistest.Start(b)
	client := srv.Client(b)
	var rt roundTripper
	var store window.Store
	o := benchStoreOptions(nil)
	if batched {
		s, err := redisstore.NewBatched(client, o, redisstore.BatchOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		rt, store = s, s
	} else {
		s := redisstore.New(client, o)
		rt, store = s, s
	}
	if cached {
		store = window.NewOverLimitCache(store)
	}
	// A fixed clock: a run that crossed the hour would be allowed 10 again.
	now := time.UnixMilli(1_763_800_020_000)
	s, err := NewServer(Options{Store: store, Rules: rs, Now: func() time.Time { return now }})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	hot := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{desc("api_key", "hot")}}
	for range 11 { // the 10 allowed, then the first denial fills the cache
		if _, err := s.ShouldRateLimit(ctx, hot); err != nil {
			b.Fatal(err)
		}
	}
	reqs := make([]*rlsv3.RateLimitRequest, 1000)
	for i := range reqs {
		ds := []*rlv3.RateLimitDescriptor{desc("api_key", "k"+strconv.Itoa(i))}
		if n == 3 {
			ds = append(ds, desc("remote_address", "10.0.0."+strconv.Itoa(i%250)))
		}
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: append(ds, desc("api_key", "hot"))}
	}
	redisCPU := func() float64 {
		info, err := client.InfoMap(ctx, "cpu").Result()
		if err != nil {
			b.Fatal(err)
		}
		user, _ := strconv.ParseFloat(info["CPU"]["used_cpu_user"], 64)
		sys, _ := strconv.ParseFloat(info["CPU"]["used_cpu_sys"], 64)
		return user + sys
	}
	rtBefore, redisBefore, cpuBefore := rt.RoundTrips(), redisCPU(), processCPU(b)
	var i atomic.Int64
	b.SetParallelism(max(1, 50/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := s.ShouldRateLimit(ctx, reqs[i.Add(1)%int64(len(reqs))])
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				b.Errorf("ShouldRateLimit = %v, %v", resp.GetOverallCode(), err)
				return
			}
		}
	})
	b.StopTimer()
	decisions := float64(b.N)
	b.ReportMetric(float64(rt.RoundTrips()-rtBefore)/decisions, "rt/op")
	b.ReportMetric((redisCPU()-redisBefore)*1e6/decisions, "redis-cpu-us/op")
	b.ReportMetric(float64(processCPU(b)-cpuBefore)/decisions, "cpu-ns/op")
}

// processCPU returns the CPU time (user and system) this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
