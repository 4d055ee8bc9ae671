package redisledger

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// BenchmarkAssign is one report of one bucket among clients others of the
// same bucket, against a local redis-server, through one replica's Ledger
// or through two in turn, all at one instant: the round trips per Assign
// (1: the write, as is when no other replica wrote the bucket since, capped
// in Redis when one did, the copy being younger than the refresh) and the
// Go side's cost.
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
					if _, err := rlqs.AssignOne(ctx, ls[i%replicas], now, "bucket", f, r, time.Minute); err != nil {
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

// BenchmarkAssignBatch is one client's report of 20 buckets, as a stream
// sends it, among clients of the same buckets, through one replica's
// Ledger, each client every 5 s of the clock the Assigns are given, against
// a local redis-server: per usage (one bucket of the report), the round
// trips (1/20 when the copies are current: one pipeline), the allocations
// and Redis's CPU.
func BenchmarkAssignBatch(b *testing.B) {
	const buckets = 20
	for _, clients := range []int{1, 10} {
		b.Run(fmt.Sprintf("buckets=%d/clients=%d", buckets, clients), func(b *testing.B) {
			srv := redistest.Start(b)
			rc := srv.BoundedClient(b)
			l := New(srv.BoundedClient(b), Options{})
			ctx := context.Background()
			f := rlqs.WindowFleet(2000, 20*time.Second)
			start := time.Now()
			reqs := make([][]rlqs.Request, clients)
			for c := range reqs {
				for k := range buckets {
					reqs[c] = append(reqs[c], rlqs.Request{Key: fmt.Sprintf("bucket-%d", k), Fleet: f, TTL: 15 * time.Second,
						Report: rlqs.Report{Client: fmt.Sprintf("envoy-%d", c), Allowed: 100, Denied: 10, Elapsed: 5 * time.Second}})
				}
			}
			step := 5 * time.Second / time.Duration(clients)
			assign := func(i int) {
				for _, r := range l.Assign(ctx, start.Add(time.Duration(i)*step), reqs[i%clients]) {
					if r.Err != nil {
						b.Fatal(r.Err)
					}
				}
			}
			for i := range clients {
				assign(i)
			}
			trips0 := l.RoundTrips()
			if err := rc.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			i := clients
			b.ReportAllocs()
			for b.Loop() {
				assign(i)
				i++
			}
			usages := float64((i - clients) * buckets)
			b.ReportMetric(float64(l.RoundTrips()-trips0)/usages, "roundtrips/usage")
			b.ReportMetric(redisUsec(b, rc)/usages, "redis-µs/usage")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/usages, "µs/usage")
		})
	}
}

// BenchmarkAssignContended is a fleet of clients reporting one bucket
// through two replicas at once (parallel callers, half on each), each
// client every 5 s of the clock the Assigns are given: the round trips per
// Assign, the share of writes the commit script capped because the other
// replica had written the bucket since, and the Go side's cost.
func BenchmarkAssignContended(b *testing.B) {
	for _, tc := range []struct{ clients, tries int }{{40, 0}, {400, 0}, {400, 1}} {
		clients := tc.clients
		tries := tc.tries
		if tries == 0 {
			tries = defaultTries
		}
		b.Run(fmt.Sprintf("replicas=2/clients=%d/tries=%d", clients, tries), func(b *testing.B) {
			srv := redistest.Start(b)
			rc := srv.BoundedClient(b)
			o := Options{Tries: tc.tries}
			ls := []*Ledger{New(srv.BoundedClient(b), o), New(srv.BoundedClient(b), o)}
			ctx := context.Background()
			f := rlqs.WindowFleet(2000, 20*time.Second)
			start := time.Now()
			step := 5 * time.Second / time.Duration(clients) // each client every 5 s
			ids := make([]string, clients)
			for i := range ids {
				ids[i] = fmt.Sprintf("envoy-%d", i)
			}
			var n atomic.Int64
			assign := func(i int) error {
				r := rlqs.Report{Client: ids[i%clients], Allowed: uint64(i % 7), Denied: 1, Elapsed: 5 * time.Second}
				_, err := rlqs.AssignOne(ctx, ls[i%2], start.Add(time.Duration(i)*step), "bucket", f, r, 15*time.Second)
				return err
			}
			for i := range clients {
				if err := assign(i); err != nil {
					b.Fatal(err)
				}
			}
			n.Store(int64(clients))
			counts := func() (trips, capped uint64) {
				for _, l := range ls {
					trips += l.RoundTrips()
					capped += l.Recomputed()
				}
				return trips, capped
			}
			trips0, capped0 := counts()
			if err := rc.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := assign(int(n.Add(1))); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			trips, capped := counts()
			ops := float64(n.Load() - int64(clients))
			b.ReportMetric(float64(trips-trips0)/ops, "roundtrips/op")
			b.ReportMetric(float64(capped-capped0)/ops, "capped/op")
			b.ReportMetric(redisUsec(b, rc)/ops, "redis-µs/op")
		})
	}
}

// redisUsec is the CPU time Redis spent on commands since the last CONFIG
// RESETSTAT, in µs, from INFO commandstats.
func redisUsec(b *testing.B, c *redis.Client) float64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		i := strings.Index(line, "usec=")
		if !strings.HasPrefix(line, "cmdstat_") || i < 0 {
			continue
		}
		v := line[i+len("usec="):]
		if j := strings.IndexByte(v, ','); j >= 0 {
			v = v[:j]
		}
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			b.Fatal(err)
		}
		total += n
	}
	return total
}
