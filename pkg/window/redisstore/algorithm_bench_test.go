package redisstore

import (
	"context"
	"math/rand/v2"
	"regexp"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// BenchmarkAlgorithms measures a batched store under 50 concurrent callers
// whose requests, all admitted, go to 1,000 keys, for each algorithm: per
// decision allocations, Redis CPU (redis-cpu-us/op) and round trips
// (rt/op).
func BenchmarkAlgorithms(b *testing.B) {
	for _, a := range []window.Algorithm{window.FixedWindow, window.SlidingWindow, window.TokenBucket, window.SlidingLog} {
		b.Run(a.String(), func(b *testing.B) { benchAlgorithm(b, a) })
	}
}

func benchAlgorithm(b *testing.B, a window.Algorithm) {
	_, client, s := benchBatched(b, redistest.Start(b), 0)
	ctx := context.Background()
	const keys = 1000
	names := make([]string, keys)
	for i := range names {
		names[i] = "bench:{k" + strconv.Itoa(i) + "}" + string(window.AppendKeyCounter(nil, 0, a))
	}
	cpu := func() float64 { return redisCPU(b, client) }
	start := time.UnixMilli(1_763_800_020_000)
	var seed, tick atomic.Int64
	b.SetParallelism(max(1, 50/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	cpuBefore, rtBefore := cpu(), s.RoundTrips()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(uint64(seed.Add(1)), 0))
		// The clock moves 1 ms every 10 decisions: 10,000 a second over
		// 1,000 keys, so a log keeps about 10 hits of its one-second
		// window, and every request has room.
		reqs := []window.Counter{{Limit: 1_000_000, Size: time.Second, Hits: 1, Algorithm: a}}
		res := make([]window.Result, 1)
		for pb.Next() {
			reqs[0].Key = names[rng.IntN(keys)]
			now := start.Add(time.Duration(tick.Add(1)/10) * time.Millisecond)
			if ok, err := s.Take(ctx, now, reqs, res); err != nil || !ok {
				b.Errorf("Take = %v, %v", ok, err)
				return
			}
		}
	})
	b.StopTimer()
	decisions := float64(b.N)
	b.ReportMetric((cpu()-cpuBefore)*1e6/decisions, "redis-cpu-us/op")
	b.ReportMetric(float64(s.RoundTrips()-rtBefore)/decisions, "rt/op")
}

// BenchmarkSlidingLogSize measures a sliding log that holds n entries, a
// counter at its limit under steady traffic: each decision one entry
// leaves the window and one comes, through an unbatched store. It
// reports Redis's memory per entry (MEMORY USAGE of the key over n,
// bytes/entry) and the script's time in Redis per call (INFO
// commandstats, redis-us/op), and the time of the worst call, n hits at
// once on an empty log (burst-redis-us), for choosing the cap on a log's
// limit.
func BenchmarkSlidingLogSize(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run("entries="+strconv.Itoa(n), func(b *testing.B) { benchLogSize(b, n) })
	}
}

func benchLogSize(b *testing.B, n int) {
	srv := redistest.Start(b)
	client := srv.Client(b)
	s := New(client, Options{Timeout: 5 * time.Second})
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		b.Fatal(err)
	}
	const step = 10 * time.Millisecond // between hits: the window holds n
	r := window.Counter{Key: "bench:{log}!sliding_log", Limit: uint64(n), Size: time.Duration(n) * step, Hits: 1, Algorithm: window.SlidingLog}
	reqs, res := []window.Counter{r}, make([]window.Result, 1)
	start := time.UnixMilli(1_763_800_020_000)
	take := func(i int) {
		if ok, err := s.Take(ctx, start.Add(time.Duration(i)*step), reqs, res); err != nil || !ok {
			b.Fatalf("Take %d = %v, %v", i, ok, err)
		}
	}
	for i := range n {
		take(i)
	}
	key := string(r.AppendStoreKey(nil, start.UnixMilli()))
	bytes, err := client.MemoryUsage(ctx, key, 0).Result()
	if err != nil {
		b.Fatal(err)
	}
	usec := func() float64 { return scriptUsec(b, client) }
	b.ReportAllocs()
	before := usec()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		take(n + i)
	}
	b.StopTimer()
	steady := (usec() - before) / float64(b.N)
	// The worst call: a burst of n hits on an empty log, n members at once.
	burst := r
	burst.Key, burst.Hits = "bench:{burst}!sliding_log", uint64(n)
	before = usec()
	if ok, err := s.Take(ctx, start, []window.Counter{burst}, res); err != nil || !ok {
		b.Fatalf("burst = %v, %v", ok, err)
	}
	b.ReportMetric(usec()-before, "burst-redis-us")
	b.ReportMetric(float64(bytes)/float64(n), "bytes/entry")
	b.ReportMetric(steady, "redis-us/op")
}

var evalshaUsec = regexp.MustCompile(`cmdstat_evalsha:calls=\d+,usec=(\d+)`)

// scriptUsec is the time (us) Redis spent in EVALSHA so far.
func scriptUsec(b *testing.B, client *redis.Client) float64 {
	info, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	m := evalshaUsec.FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}
