package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// TestBatchRepeatedKeys sends batches whose requests hit the same counters
// many times, each batch in one script call, which reads such a counter
// once, decides every request on its running count and writes it once.
// Every request must still be decided as if it were sent alone, in order:
// each batch is run again one Take at a time on keys of their own, and the
// answers, the counters afterwards and their TTLs must be the same. So must
// they when the call lists no shared keys, and the script decides a key
// used many times one command per use. Some answers are also checked by
// hand.
func TestBatchRepeatedKeys(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	batched := mustBatched(t, client, Options{}, BatchOptions{Workers: 1})
	t.Cleanup(func() { batched.Close() })
	alone := New(client, Options{})
	ctx := context.Background()
	if err := batched.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	// 20 s into a minute window: a sliding counter weighs its previous
	// window 2/3.
	now := storetest.T0.Add(20 * time.Second)
	type want struct {
		allowed bool
		failed  bool
		counts  []uint64 // Result.Count per counter; nil: not checked
		over    []bool   // Result.Over per counter; nil: not checked
	}
	r := func(key string, limit, hits uint64) window.Counter {
		return window.Counter{Key: "{" + key + "}", Limit: limit, Size: time.Minute, Hits: hits}
	}
	shadow := func(q window.Counter) window.Counter { q.Shadow = true; return q }
	refund := func(q window.Counter) window.Counter { q.Refund = true; return q }
	charge := func(q window.Counter) window.Counter { q.Charge = true; return q }
	sliding := func(q window.Counter) window.Counter { q.Algorithm = window.SlidingWindow; return q }
	tests := []struct {
		name string
		// before: counters set before the batch, by key (the request's Key)
		// and window, 0 the current window and -1 the previous one.
		before map[string]map[int]string
		calls  [][]window.Counter
		want   []want
	}{{
		name: "mixed allowed and denied, in order",
		calls: [][]window.Counter{
			{r("a", 5, 2)}, {r("a", 5, 2)}, {r("a", 5, 2)}, {r("a", 5, 1)}, {r("a", 5, 1)}, {r("a", 5, 1)},
		},
		want: []want{
			{allowed: true, counts: []uint64{2}}, {allowed: true, counts: []uint64{4}},
			{counts: []uint64{4}, over: []bool{true}}, // 4 + 2 > 5: denied, the next still fits
			{allowed: true, counts: []uint64{5}}, {counts: []uint64{5}, over: []bool{true}},
			{counts: []uint64{5}, over: []bool{true}},
		},
	}, {
		name:   "an existing counter keeps its TTL",
		before: map[string]map[int]string{"a": {0: "3"}},
		calls:  [][]window.Counter{{r("a", 5, 1)}, {r("a", 5, 2)}, {r("a", 5, 1)}},
		want: []want{
			{allowed: true, counts: []uint64{4}}, {counts: []uint64{4}, over: []bool{true}},
			{allowed: true, counts: []uint64{5}},
		},
	}, {
		name: "a denied multi-counter request between allowed ones",
		calls: [][]window.Counter{
			{r("a", 10, 1)}, {r("a", 10, 1), r("b", 2, 1)}, {r("b", 2, 1)},
			{r("a", 10, 1), r("b", 2, 1)}, // b is full: a is not counted
			{r("a", 10, 1)}, {r("c", 3, 1), r("a", 10, 1)},
		},
		want: []want{
			{allowed: true, counts: []uint64{1}}, {allowed: true, counts: []uint64{2, 1}},
			{allowed: true, counts: []uint64{2}}, {counts: []uint64{2, 2}, over: []bool{false, true}},
			{allowed: true, counts: []uint64{3}}, {allowed: true, counts: []uint64{1, 4}},
		},
	}, {
		name: "new counters that no request may take are not left behind",
		calls: [][]window.Counter{
			{r("a", 5, 6)}, {r("a", 5, 6)}, {r("b", 5, 1), r("a", 5, 6)}, {r("b", 5, 1), r("a", 5, 9)},
		},
		want: []want{
			{counts: []uint64{0}, over: []bool{true}}, {counts: []uint64{0}, over: []bool{true}},
			{counts: []uint64{0, 0}, over: []bool{false, true}}, {counts: []uint64{0, 0}, over: []bool{false, true}},
		},
	}, {
		name: "a charge among them",
		calls: [][]window.Counter{
			{r("a", 5, 2)},
			{r("full", 0, 1), charge(r("a", 5, 2))}, // denied by full, a is charged: 4
			{r("a", 5, 1)},                          // 5
			{r("a", 5, 1)},                          // denied
			{charge(r("a", 5, 3))},                  // over, charged: 8
			{r("a", 5, 1)},                          // denied
		},
		want: []want{
			{allowed: true, counts: []uint64{2}}, {counts: []uint64{0, 4}, over: []bool{true, false}},
			{allowed: true, counts: []uint64{5}}, {counts: []uint64{5}, over: []bool{true}},
			{counts: []uint64{8}, over: []bool{true}}, {counts: []uint64{8}, over: []bool{true}},
		},
	}, {
		name: "shadow",
		calls: [][]window.Counter{
			{shadow(r("s", 2, 1))}, {shadow(r("s", 2, 1))}, {shadow(r("s", 2, 1))},
			{r("s", 2, 1)},                       // a plain counter on it is denied
			{r("a", 5, 1), shadow(r("s", 2, 1))}, // a shadow over its limit denies nothing
		},
		want: []want{
			{allowed: true, counts: []uint64{1}}, {allowed: true, counts: []uint64{2}},
			{allowed: true, counts: []uint64{3}, over: []bool{true}}, {counts: []uint64{3}, over: []bool{true}},
			{allowed: true, counts: []uint64{1, 4}, over: []bool{false, true}},
		},
	}, {
		name:   "a sliding-window counter repeated",
		before: map[string]map[int]string{"w": {-1: "6"}}, // weighs 4
		calls: [][]window.Counter{
			{sliding(r("w", 8, 1))}, {sliding(r("w", 8, 2))}, {sliding(r("w", 8, 2))}, // 4+3+2 > 8
			{sliding(r("w", 8, 1))}, {r("a", 9, 1), sliding(r("w", 8, 1))},
		},
		want: []want{
			{allowed: true, counts: []uint64{1}}, {allowed: true, counts: []uint64{3}},
			{counts: []uint64{3}, over: []bool{true}}, {allowed: true, counts: []uint64{4}},
			{counts: []uint64{0, 4}, over: []bool{false, true}},
		},
	}, {
		name:   "refunds",
		before: map[string]map[int]string{"old": {0: "2"}},
		calls: [][]window.Counter{
			{r("a", 5, 3)}, {refund(r("a", 5, 2))}, {r("a", 5, 4)}, {r("a", 5, 1)},
			{refund(r("a", 5, 10))}, // floored at 0
			{r("a", 5, 1)},
			{refund(r("old", 5, 5))}, {r("old", 5, 5)}, // an existing counter refunded to 0 keeps its TTL
			{refund(r("none", 5, 1))}, // a refund on a missing counter writes nothing
		},
		want: []want{
			{allowed: true, counts: []uint64{3}}, {allowed: true, counts: []uint64{1}},
			{allowed: true, counts: []uint64{5}}, {counts: []uint64{5}, over: []bool{true}},
			{allowed: true, counts: []uint64{0}}, {allowed: true, counts: []uint64{1}},
			{allowed: true, counts: []uint64{0}}, {allowed: true, counts: []uint64{5}},
			{allowed: true, counts: []uint64{0}},
		},
	}, {
		name:   "a corrupt counter fails only the requests on it",
		before: map[string]map[int]string{"x": {0: "1.5"}},
		calls: [][]window.Counter{
			{r("a", 5, 1)}, {r("a", 5, 1), r("x", 5, 1)}, {r("a", 5, 1)}, {shadow(r("x", 5, 1))}, {r("a", 5, 1)},
		},
		want: []want{
			{allowed: true, counts: []uint64{1}}, {failed: true}, {allowed: true, counts: []uint64{2}},
			{failed: true}, {allowed: true, counts: []uint64{3}},
		},
	}, {
		name: "the same counter twice in a request, among others on it",
		calls: [][]window.Counter{
			{r("a", 5, 1)}, {r("a", 5, 2), r("a", 5, 2)}, {r("a", 5, 1), r("a", 5, 1)}, {r("a", 5, 1)},
		},
		want: []want{
			{allowed: true, counts: []uint64{1}}, {allowed: true, counts: []uint64{3, 5}},
			{counts: []uint64{5, 5}, over: []bool{true, true}}, {counts: []uint64{5}, over: []bool{true}},
		},
	}}
	for i, tt := range tests {
		// Each case runs three times, on keys of its own: batched, one Take
		// at a time, and batched without shared keys.
		var got [3]struct {
			allowed, failed []bool
			res             [][]window.Result
			after           []string
		}
		for run := range got {
			prefix := fmt.Sprintf("t%d-%d:", i, run)
			key := func(q window.Counter) window.Counter { q.Key = prefix + q.Key; return q }
			for k, byWindow := range tt.before {
				for shift, v := range byWindow {
					w := window.At(now, time.Minute)
					if shift == -1 {
						w = w.Previous()
					}
					full := string(window.AppendWindow([]byte(prefix+"{"+k+"}"), w))
					if err := client.Set(ctx, full, v, time.Hour).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			g := &got[run]
			g.allowed, g.failed = make([]bool, len(tt.calls)), make([]bool, len(tt.calls))
			var batch []*pending
			for j, reqs := range tt.calls {
				own := make([]window.Counter, len(reqs))
				for k, q := range reqs {
					own[k] = key(q)
				}
				res := make([]window.Result, len(own))
				g.res = append(g.res, res)
				if run != 1 {
					batch = append(batch, &pending{ctx: ctx, deadline: time.Now().Add(time.Minute), take: newTake(now.UnixMilli(), own, nil), done: make(chan struct{}, 1)})
					continue
				}
				ok, err := alone.Take(ctx, now, own, res)
				g.allowed[j], g.failed[j] = ok, err != nil
			}
			if run == 0 {
				before := batched.RoundTrips()
				batched.batch.send(batch, &sendBuf{})
				if trips := batched.RoundTrips() - before; trips != 1 {
					t.Fatalf("%s: the batch took %d round trips, want 1", tt.name, trips)
				}
			}
			if run == 2 {
				sendUnshared(ctx, batched, batch)
			}
			if run != 1 {
				for j, c := range batch {
					err := c.err
					if err == nil {
						g.allowed[j], err = parseRequest(c.vals, &c.take, g.res[j])
					}
					g.failed[j] = err != nil
				}
			}
			for _, reqs := range tt.calls {
				for _, q := range reqs {
					for _, w := range []window.Window{window.At(now, time.Minute), window.At(now, time.Minute).Previous()} {
						full := string(window.AppendWindow([]byte(prefix+q.Key), w))
						v, _ := client.Get(ctx, full).Result()
						ttl := client.PTTL(ctx, full).Val().Round(time.Minute)
						g.after = append(g.after, fmt.Sprintf("%s=%q ttl %v", q.Key, v, ttl))
					}
				}
			}
		}
		if fmt.Sprint(got[2]) != fmt.Sprint(got[0]) {
			t.Errorf("%s: without shared keys\n%+v\nwith\n%+v", tt.name, got[2], got[0])
		}
		b, a := got[0], got[1]
		for j, w := range tt.want {
			if b.failed[j] != w.failed || !w.failed && b.allowed[j] != w.allowed {
				t.Errorf("%s: request %d: allowed %v, failed %v; want %v, %v", tt.name, j, b.allowed[j], b.failed[j], w.allowed, w.failed)
				continue
			}
			for k, res := range b.res[j] {
				if w.counts != nil && res.Count != w.counts[k] || w.over != nil && res.Over != w.over[k] {
					t.Errorf("%s: request %d, counter %d: %+v, want count %v, over %v", tt.name, j, k, res, w.counts, w.over)
				}
			}
		}
		if fmt.Sprint(b.allowed, b.failed) != fmt.Sprint(a.allowed, a.failed) {
			t.Errorf("%s: batched allowed %v failed %v, one at a time %v %v", tt.name, b.allowed, b.failed, a.allowed, a.failed)
		}
		for j := range b.res {
			if !b.failed[j] && fmt.Sprint(b.res[j]) != fmt.Sprint(a.res[j]) {
				t.Errorf("%s: request %d: batched %+v, one at a time %+v", tt.name, j, b.res[j], a.res[j])
			}
		}
		if fmt.Sprint(b.after) != fmt.Sprint(a.after) {
			t.Errorf("%s: counters after the batch\n%v\none at a time\n%v", tt.name, b.after, a.after)
		}
	}
}

// sendUnshared sends batch as one script call as the batcher would, but with
// no shared keys listed, and hands each call its part of the reply.
func sendUnshared(ctx context.Context, s *Store, batch []*pending) {
	parts := make([]take, len(batch))
	for i, c := range batch {
		parts[i] = c.take
	}
	var b callBuf
	args := b.build(parts)
	nkeys := args[2].(int)
	head := 3 + nkeys
	shared := args[head+1].(int)
	var strip []any
	strip = append(strip, args[:2]...)
	strip = append(strip, nkeys-shared)
	strip = append(strip, args[3+shared:head]...)
	strip = append(strip, args[head], 0)
	strip = append(strip, args[head+2:len(args)-shared]...)
	v, err := s.script(ctx, strip)
	var vals []any
	if err == nil {
		vals, err = replyValues(v)
	}
	for _, c := range batch {
		if err != nil {
			c.err = err
			continue
		}
		c.vals, vals, c.err = cutReply(vals, c.short, len(c.reqs))
	}
}
