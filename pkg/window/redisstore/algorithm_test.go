package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// pinged returns an unbatched Store over client after a Ping.
func pinged(t testing.TB, client scripter) *Store {
	t.Helper()
	s := New(client, Options{Timeout: 5 * time.Second})
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestBucketAndLogGuarantee checks the token bucket's and the sliding
// log's guarantees (see storetest.Guarantee) on one Redis, on two replicas
// (one batched) sharing it, and on a Redis Cluster.
func TestBucketAndLogGuarantee(t *testing.T) {
	t.Parallel()
	setups := map[string]func(t *testing.T) []window.Store{
		"one redis": func(t *testing.T) []window.Store {
			return []window.Store{pinged(t, redistest.Start(t).Client(t))}
		},
		"two replicas": func(t *testing.T) []window.Store {
			srv := redistest.Start(t)
			b := mustBatched(t, srv.Client(t), Options{Timeout: 5 * time.Second}, BatchOptions{})
			t.Cleanup(func() { _ = b.Close() })
			return []window.Store{pinged(t, srv.Client(t)), b}
		},
		"cluster": func(t *testing.T) []window.Store {
			c := redistest.StartCluster(t, 3)
			return []window.Store{pinged(t, c.Client(t)), pinged(t, c.Client(t))}
		},
	}
	for name, setup := range setups {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			stores := setup(t)
			for i, r := range storetest.GuaranteeRequests() {
				// A hash tag of its own: on a cluster, several slots.
				r.Key = "g:{" + strconv.Itoa(i) + "}" + r.Key[len("g:{b}"):]
				storetest.Guarantee(t, uint64(i), 600, r, stores...)
			}
		})
	}
}

// TestBucketAndLogKeys: a bucket's key is the counter's key and its size,
// holds the TAT readable with GET, and lives until the bucket is full plus
// a second; a log's is a sorted set of one member per hit scored by time,
// living its window plus a second after each write.
func TestBucketAndLogKeys(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t)
	s := pinged(t, client)
	ctx := context.Background()
	head := string(window.AppendKeyEnd(window.AppendKeyEntry(window.AppendKeyHead(nil, "ratelimit", "edge"), "api_key", "alice")))
	bucket := window.Counter{Key: string(window.AppendKeyCounter([]byte(head), 0, window.TokenBucket)),
		Limit: 3, Size: time.Second, Hits: 2, Algorithm: window.TokenBucket}
	log := window.Counter{Key: string(window.AppendKeyCounter([]byte(head), 1, window.SlidingLog)),
		Limit: 5, Size: time.Minute, Hits: 2, Algorithm: window.SlidingLog}
	now := storetest.T0.Add(123 * time.Millisecond)
	if ok, _ := storetest.Take(t, s, now, bucket, log); !ok {
		t.Fatal("denied")
	}
	bkey, lkey := "ratelimit:{edge|api_key=alice}!token_bucket:1000", "ratelimit:{edge|api_key=alice}!1,sliding_log:60000"
	if got := string(bucket.AppendStoreKey(nil, now.UnixMilli())); got != bkey {
		t.Errorf("bucket key %q, want %q", got, bkey)
	}
	// Two tokens of 333333334 ns: the TAT is now + 666.666668 ms.
	wantTAT := strconv.FormatInt(now.UnixMilli()+666, 10) + ".666668"
	if v, err := client.Get(ctx, bkey).Result(); err != nil || v != wantTAT {
		t.Errorf("GET %s = %q, %v, want %q", bkey, v, err, wantTAT)
	}
	if ttl := client.PTTL(ctx, bkey).Val(); ttl <= time.Second || ttl > 1667*time.Millisecond {
		t.Errorf("PTTL %s = %v, want in (1s, 1.667s]", bkey, ttl)
	}
	members, err := client.ZRangeWithScores(ctx, lkey, 0, -1).Result()
	ms := strconv.FormatInt(now.UnixMilli(), 10)
	if err != nil || len(members) != 2 || members[0].Member != ms+":10" || members[1].Member != ms+":11" ||
		members[0].Score != float64(now.UnixMilli()) || members[1].Score != float64(now.UnixMilli()) {
		t.Errorf("ZRANGE %s = %v, %v, want members %s:10 and %s:11 scored %s", lkey, members, err, ms, ms, ms)
	}
	if ttl := client.PTTL(ctx, lkey).Val(); ttl <= 60*time.Second || ttl > 61*time.Second {
		t.Errorf("PTTL %s = %v, want in (60s, 61s]", lkey, ttl)
	}
	// Eleven more hits at the same ms: members stay unique, in order.
	log.Hits, log.Limit, log.Charge = 11, 100, true
	storetest.Take(t, s, now, log)
	if n := client.ZCard(ctx, lkey).Val(); n != 13 {
		t.Errorf("ZCARD %s = %d after 13 hits, want 13", lkey, n)
	}
	if last := client.ZRange(ctx, lkey, -1, -1).Val(); len(last) != 1 || last[0] != ms+":212" {
		t.Errorf("newest member %v, want %s:212", last, ms)
	}
	// A key of another type fails the call and writes nothing.
	if err := client.Set(ctx, lkey, "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	_, err = s.Take(ctx, now, []window.Counter{bucket, log}, make([]window.Result, 2))
	if err == nil {
		t.Error("Take on a log key holding a string: no error")
	}
	if v := client.Get(ctx, bkey).Val(); v != wantTAT {
		t.Errorf("after a failed call GET %s = %q, want %q unchanged", bkey, v, wantTAT)
	}
	if err := client.Set(ctx, bkey, "12", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Take(ctx, now, []window.Counter{bucket}, make([]window.Result, 1)); err == nil {
		t.Error("Take on a bucket key holding no TAT: no error")
	}
}

// TestMatchesMemory sends random request sequences through Memory and the
// Redis stores (unbatched, batched and on a Cluster) and wants the same
// answers to the last ns: every algorithm, several counters, refunds,
// charges, shadows, checks (hits 0), and one counter named twice.
func TestMatchesMemory(t *testing.T) {
	t.Parallel()
	setups := map[string]func(t *testing.T) window.Store{
		"redis": func(t *testing.T) window.Store { return pinged(t, redistest.Start(t).Client(t)) },
		"batched": func(t *testing.T) window.Store {
			b := mustBatched(t, redistest.Start(t).Client(t), Options{Timeout: 5 * time.Second}, BatchOptions{})
			t.Cleanup(func() { _ = b.Close() })
			return b
		},
		"cluster": func(t *testing.T) window.Store { return pinged(t, redistest.StartCluster(t, 3).Client(t)) },
		"batched cluster": func(t *testing.T) window.Store {
			b := mustBatched(t, redistest.StartCluster(t, 3).Client(t), Options{Timeout: 5 * time.Second}, BatchOptions{})
			t.Cleanup(func() { _ = b.Close() })
			if err := b.Ping(context.Background()); err != nil {
				t.Fatal(err)
			}
			return b
		},
	}
	for name, setup := range setups {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := setup(t)
			for seed := range uint64(3) {
				differ(t, seed, strings.HasSuffix(name, "cluster"), s)
			}
		})
	}
}

// differ runs one random sequence through s and a new Memory. On a
// cluster a request names no counter twice: a request over several slots
// that is denied gives back each counter's hits in turn, so the answers of
// a counter named twice there show the state between the two (see
// takeSlots).
func differ(t *testing.T, seed uint64, cluster bool, s window.Store) {
	rng := rand.New(rand.NewPCG(seed, 2))
	var counters []window.Counter
	for i := range 8 {
		a := window.Algorithm(i % 4)
		r := window.Counter{
			Key:       fmt.Sprintf("d%d:{c%d}", seed, i%4) + string(window.AppendKeyCounter(nil, i/4, a)),
			Limit:     uint64(rng.IntN(7)),
			Size:      time.Duration(10+rng.IntN(50)) * time.Second,
			Algorithm: a,
		}
		if a == window.TokenBucket && rng.IntN(2) == 0 {
			r.Burst = uint64(1 + rng.IntN(9))
		}
		counters = append(counters, r)
	}
	m := window.NewMemory()
	ctx := context.Background()
	now := storetest.T0.Add(time.Duration(seed) * time.Hour)
	for step := range 400 {
		now = now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
		n := 1 + rng.IntN(3)
		reqs := make([]window.Counter, 0, n)
		for len(reqs) < n {
			r := counters[rng.IntN(len(counters))]
			switch h := rng.IntN(10); {
			case h < 5:
				r.Hits = 1
			case h < 7:
				r.Hits = 0
			default:
				r.Hits = uint64(rng.IntN(10))
			}
			switch rng.IntN(10) {
			case 0:
				r.Refund = true
			case 1:
				r.Charge = true
			case 2:
				r.Shadow = true
			}
			clash := false
			for _, o := range reqs {
				// Never a refund and a take of one counter in one request:
				// on a cluster refunds go after the takes; nor, there, a
				// counter twice (see above).
				if o.Key == r.Key && (o.Refund != r.Refund || cluster) {
					clash = true
				}
			}
			if !clash {
				reqs = append(reqs, r)
			}
		}
		want := make([]window.Result, n)
		wantOK, _ := m.Take(ctx, now, reqs, want)
		got := make([]window.Result, n)
		ok, err := s.Take(ctx, now, reqs, got)
		if err != nil {
			t.Fatalf("seed %d step %d: Take(%+v): %v", seed, step, reqs, err)
		}
		if cluster && !ok {
			// A denied request over several slots never sends its refunds
			// (nothing is counted), so it does not read their counters
			// either: their Results stay zero where Memory's show them.
			for i := range reqs {
				if reqs[i].Refund && got[i] == (window.Result{}) {
					want[i] = got[i]
				}
			}
		}
		if ok != wantOK || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("seed %d step %d at %v: Take(%+v)\n = %v %+v\nMemory %v %+v", seed, step, now.Sub(storetest.T0), reqs, ok, got, wantOK, want)
		}
	}
}
