package ledgertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// batch is one Assign of a Batch case: its requests, at `at`.
type batch struct {
	at   time.Duration
	reqs []rlqs.Request
}

func req(key string, f rlqs.Fleet, r rlqs.Report) rlqs.Request {
	return rlqs.Request{Key: key, Fleet: f, Report: r, TTL: tableTTL}
}

// many is one request per bucket k0..k<n-1> from client, each reporting a
// different demand.
func many(n int, client string, elapsed time.Duration) []rlqs.Request {
	reqs := make([]rlqs.Request, n)
	for i := range reqs {
		reqs[i] = req(fmt.Sprintf("k%d", i), tenPerSecond, report(client, uint64(i*3), uint64(i%4), elapsed))
	}
	return reqs
}

func batchCases() []struct {
	name    string
	batches []batch
} {
	sec := time.Second
	return []struct {
		name    string
		batches []batch
	}{
		{"many buckets: subscribe, report, a second client", []batch{
			{0, many(20, "a", 0)},
			{5 * sec, many(20, "a", 5*sec)},
			{5100 * time.Millisecond, many(20, "b", 0)},
			{6 * sec, many(20, "b", 0)}, // b's re-checks
		}},
		{"one key twice in a batch: served in order", []batch{
			{0, []rlqs.Request{
				req("k", tenPerSecond, report("a", 50, 50, 5*sec)),
				req("j", tenPerSecond, report("a", 1, 0, 0)),
				req("k", tenPerSecond, report("b", 1, 0, 0)),
				req("k", tenPerSecond, report("a", 50, 50, 5*sec)),
			}},
			{6 * sec, []rlqs.Request{
				req("k", tenPerSecond, report("b", 0, 0, 0)),
				req("k", tenPerSecond, report("a", 0, 0, 0)),
			}},
		}},
		{"rules of every kind in one batch", []batch{
			{0, []rlqs.Request{
				req("zero", rlqs.Fleet{Period: sec}, report("a", 1, 0, 0)),
				req("window", rlqs.WindowFleet(100, 20*sec), report("a", 40, 10, 5*sec)),
				req("tb", tenPerSecond, report("a", 5, 0, 5*sec)),
			}},
			{5 * sec, []rlqs.Request{
				req("tb", rlqs.Fleet{Tokens: 2, Period: sec, Burst: 4}, report("a", 30, 20, 5*sec)),
				req("window", rlqs.WindowFleet(100, 20*sec), report("a", 0, 0, 5*sec)),
			}},
		}},
	}
}

// Batch runs batches of requests through a ledger from newLedger (a new,
// empty one per case) and the same requests one at a time, in order,
// through a Memory, and checks that every result is Memory's: a batch
// answers as its requests would one by one.
func Batch(t *testing.T, newLedger func(t *testing.T) rlqs.Ledger) {
	for _, tc := range batchCases() {
		t.Run(tc.name, func(t *testing.T) {
			l, ref := newLedger(t), rlqs.NewMemory(rlqs.Policy{})
			ctx := context.Background()
			for i, bt := range tc.batches {
				now := Start.Add(bt.at)
				got := l.Assign(ctx, now, bt.reqs)
				if len(got) != len(bt.reqs) {
					t.Fatalf("batch %d: %d results for %d requests", i, len(got), len(bt.reqs))
				}
				for j, q := range bt.reqs {
					want, _ := rlqs.AssignOne(ctx, ref, now, q.Key, q.Fleet, q.Report, q.TTL)
					if got[j].Err != nil || !sameShare(got[j].Share, want) {
						t.Fatalf("batch %d at %v, request %d (%s, %+v) = %+v, %v; want %+v as alone",
							i, bt.at, j, q.Key, q.Report, got[j].Share, got[j].Err, want)
					}
				}
			}
		})
	}
}

// ConcurrentBatches has workers report the same buckets at once, each in
// batches of its own order of the keys, through ledgers[worker%len], and
// checks that no Assign waits on another forever (a ledger that locked a
// batch's buckets in request order would deadlock here) and that each
// bucket's last shares sum to at most its fleet's rate.
func ConcurrentBatches(t *testing.T, workers, rounds, keys int, ledgers ...rlqs.Ledger) {
	t.Helper()
	f := tenPerSecond
	last := make([][]rlqs.Result, workers)
	done := make(chan error, workers)
	for w := range workers {
		go func() {
			l := ledgers[w%len(ledgers)]
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range rounds {
				order := rng.Perm(keys)
				reqs := make([]rlqs.Request, keys)
				for j, k := range order {
					reqs[j] = req(fmt.Sprintf("hot%d", k), f, report(fmt.Sprintf("w%d", w), uint64(w+1)*uint64(i+1), 0, time.Second))
				}
				res := l.Assign(context.Background(), Start, reqs)
				for j, r := range res {
					if r.Err != nil {
						done <- fmt.Errorf("worker %d, %s: %w", w, reqs[j].Key, r.Err)
						return
					}
				}
				// By key, for the sums.
				byKey := make([]rlqs.Result, keys)
				for j, k := range order {
					byKey[k] = res[j]
				}
				last[w] = byKey
			}
			done <- nil
		}()
	}
	timeout := time.After(time.Minute)
	for range workers {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			t.Fatal("concurrent batches still running after a minute: deadlocked")
		}
	}
	for k := range keys {
		var rate uint64
		for w := range workers {
			rate += last[w][k].Share.Rate
		}
		if r := rlqs.FleetRate(f); rate > r || rate == 0 {
			t.Fatalf("hot%d: concurrent shares sum to rate %d, want (0, %d]", k, rate, r)
		}
	}
}
