package redisstore

import (
	"context"
	"math/rand/v2"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// BenchmarkHotKeys measures a batched store under 50 concurrent callers
// whose requests, all with room, hit hot keys: in "hot50" half of them go
// to 10 keys and the other half spread over 1,000, in "hot100" all go to
// the 10 keys, and "cold" (none hot, all over 1,000 keys) is the reference.
// Besides allocations it reports per decision: Redis commands, counted as
// INFO commandstats counts them (the script's own commands included, INFO
// left out) in cmds/op, Redis CPU (user and system, from INFO cpu) in
// redis-cpu-us/op, and round trips in rt/op.
func BenchmarkHotKeys(b *testing.B) {
	for _, sc := range []struct {
		name string
		hot  int // of every 10 requests, how many go to the hot keys
	}{{"hot50", 5}, {"hot100", 10}, {"cold", 0}} {
		b.Run(sc.name, func(b *testing.B) {
			srv, client, s := benchBatched(b, redistest.Start(b), 0)
			benchHotKeys(b, srv, client, s, sc.hot)
		})
	}
}

// BenchmarkWaitReplicas measures what Options.WaitReplicas costs, as
// BenchmarkHotKeys's "cold" case measures a store: a master with one
// replica, the batched store without WAIT ("off") and with a WAIT for the
// replica after every script call ("wait1", what the sidecar does behind
// Sentinel by default).
func BenchmarkWaitReplicas(b *testing.B) {
	for _, wait := range []int{0, 1} {
		name := "off"
		if wait > 0 {
			name = "wait" + strconv.Itoa(wait)
		}
		b.Run(name, func(b *testing.B) {
			// Redis 7 waits 5 s for more replicas before a diskless full
			// sync (repl-diskless-sync-delay); one replica needs no wait.
			master := redistest.StartWith(b, redistest.Options{Args: []string{"--repl-diskless-sync-delay", "0"}})
			host, port, _ := net.SplitHostPort(master.Addr)
			redistest.StartWith(b, redistest.Options{Args: []string{"--replicaof", host, port}})
			mc := master.Client(b)
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				info, err := mc.Info(context.Background(), "replication").Result()
				if err == nil && strings.Contains(info, "state=online") {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("replica not in sync: %v %s", err, info)
				}
			}
			srv, client, s := benchBatched(b, master, wait)
			benchHotKeys(b, srv, client, s, 0)
		})
	}
}

// benchBatched returns srv, its client and a batched store on it (WAIT for
// wait replicas after each script call) with the script loaded, closed when
// b ends. Its timeout is generous: a busy machine must not fail a benchmark.
func benchBatched(b *testing.B, srv *redistest.Server, wait int) (*redistest.Server, *redis.Client, *Store) {
	client := srv.Client(b)
	s := mustBatched(b, client, Options{Timeout: 5 * time.Second, WaitReplicas: wait}, BatchOptions{})
	b.Cleanup(func() { s.Close() })
	if err := s.Ping(context.Background()); err != nil {
		b.Fatal(err)
	}
	return srv, client, s
}

// redisCPU is Redis's CPU time so far (user and system, in s).
func redisCPU(b *testing.B, client *redis.Client) float64 {
	info, err := client.InfoMap(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	user, _ := strconv.ParseFloat(info["CPU"]["used_cpu_user"], 64)
	sys, _ := strconv.ParseFloat(info["CPU"]["used_cpu_sys"], 64)
	return user + sys
}

func benchHotKeys(b *testing.B, srv *redistest.Server, client *redis.Client, s *Store, hotOf10 int) {
	ctx := context.Background()
	const hotKeys, coldKeys = 10, 1000
	hot := make([]string, hotKeys)
	for i := range hot {
		hot[i] = "bench:{hot" + strconv.Itoa(i) + "}"
	}
	cold := make([]string, coldKeys)
	for i := range cold {
		cold[i] = "bench:{k" + strconv.Itoa(i) + "}"
	}
	commands := func() int64 {
		stats, err := srv.CommandStats(ctx)
		if err != nil {
			b.Fatal(err)
		}
		var n int64
		for name, calls := range stats {
			if name != "info" {
				n += calls
			}
		}
		return n
	}
	now := time.UnixMilli(1_763_800_020_000) // one window for the whole run
	var seed atomic.Uint64
	b.SetParallelism(max(1, 50/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	cmdsBefore, cpuBefore, rtBefore := commands(), redisCPU(b, client), s.RoundTrips()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(seed.Add(1), 0))
		reqs := []window.Counter{{Limit: 1_000_000_000, Size: time.Second, Hits: 1}}
		res := make([]window.Result, 1)
		for pb.Next() {
			if rng.IntN(10) < hotOf10 {
				reqs[0].Key = hot[rng.IntN(hotKeys)]
			} else {
				reqs[0].Key = cold[rng.IntN(coldKeys)]
			}
			if ok, err := s.Take(ctx, now, reqs, res); err != nil || !ok {
				b.Errorf("Take = %v, %v", ok, err)
				return
			}
		}
	})
	b.StopTimer()
	decisions := float64(b.N)
	b.ReportMetric(float64(commands()-cmdsBefore)/decisions, "cmds/op")
	b.ReportMetric((redisCPU(b, client)-cpuBefore)*1e6/decisions, "redis-cpu-us/op")
	b.ReportMetric(float64(s.RoundTrips()-rtBefore)/decisions, "rt/op")
}
