package window

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/redistest"
)

// TestBatchDecidesEachRequestAlone sends one hand-built batch, so the
// requests are certain to share one script call, and checks they are decided
// one by one as separate calls would be: a denied request counts nothing and
// does not deny its neighbours, and a corrupt counter fails only its own
// request.
func TestBatchDecidesEachRequestAlone(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	s := NewBatchedRedis(client, RedisOptions{}, BatchOptions{Workers: 1})
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil { // loads the script: no NOSCRIPT round trip
		t.Fatal(err)
	}
	now := time.UnixMilli(1_763_800_035_000)
	r := func(key string, limit, hits uint64) Request {
		return Request{Key: "test:{" + key + "}", Limit: limit, Size: time.Minute, Hits: hits}
	}
	corrupt := string(AppendWindow([]byte("test:{corrupt}"), At(now, time.Minute)))
	if err := client.Set(ctx, corrupt, "not a number", 0).Err(); err != nil {
		t.Fatal(err)
	}
	calls := [][]Request{
		{r("full", 1, 1)},
		{r("full", 1, 1)},                   // denied: the first took the only hit
		{r("other", 5, 1), r("full", 1, 1)}, // denied as a whole: other not counted
		{r("corrupt", 5, 1)},                // fails alone
		{r("other", 5, 1)},                  // counted: 1
	}
	var batch []*batchCall
	for _, reqs := range calls {
		batch = append(batch, &batchCall{ctx: ctx, deadline: time.Now().Add(time.Second), nowMs: now.UnixMilli(), reqs: reqs, short: shortCall(reqs, nil)})
	}
	before := s.RoundTrips()
	buf := &sendBuf{}
	s.batch.send(batch, buf)
	if len(buf.live) != len(calls) || s.RoundTrips()-before != 1 {
		t.Fatalf("sent %d calls in %d round trips, want %d in 1", len(buf.live), s.RoundTrips()-before, len(calls))
	}
	wantOK := []bool{true, false, false, false, true}
	for i, c := range batch {
		res := make([]Result, len(calls[i]))
		allowed, err := false, c.err
		if err == nil {
			allowed, err = parseRequest(c.vals, res)
		}
		if (err != nil) != (i == 3) {
			t.Errorf("call %d: err %v", i, err)
		}
		if err == nil && allowed != wantOK[i] {
			t.Errorf("call %d: allowed %v, want %v", i, allowed, wantOK[i])
		}
		if i == 4 && res[0].Count != 1 {
			t.Errorf("other count = %d, want 1: the denied call 2 must not count it", res[0].Count)
		}
	}
}

// TestBatchLinger drives a worker's linger step alone, with no Redis: it
// must take in a request that arrives while it waits, wait no longer than
// half the time to the batch's earliest deadline, and give up at Close.
func TestBatchLinger(t *testing.T) {
	t.Parallel()
	newCall := func(deadline time.Time) *batchCall {
		return &batchCall{ctx: context.Background(), deadline: deadline, done: make(chan struct{}, 1)}
	}
	far := time.Now().Add(time.Hour)
	for _, tt := range []struct {
		name     string
		linger   time.Duration
		deadline time.Time     // of the batch's first request
		arrive   bool          // a second request is queued once linger runs
		stop     bool          // the batcher is closed once linger runs
		want     int           // requests in the batch linger returns
		within   time.Duration // linger must return sooner than this
	}{
		// The timer cannot fire before a second has passed; the request
		// is queued long before.
		{name: "takes in a late request", linger: time.Second, deadline: far, arrive: true, want: 2, within: time.Hour},
		// Half of the ~2 s left bounds a linger of an hour.
		{name: "bounded by the deadline", linger: time.Hour, deadline: time.Now().Add(2 * time.Second), want: 1, within: 30 * time.Minute},
		{name: "deadline passed", linger: time.Hour, deadline: time.Now().Add(-time.Second), want: 1, within: 30 * time.Minute},
		{name: "ends at Close", linger: time.Hour, deadline: far, stop: true, want: 1, within: 30 * time.Minute},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := &batcher{opts: BatchOptions{MaxBatch: 4, Linger: tt.linger}, queue: make(chan *batchCall, 4), stop: make(chan struct{})}
			timer := time.NewTimer(time.Hour)
			timer.Stop()
			started := make(chan struct{})
			go func() {
				<-started
				if tt.arrive {
					b.queue <- newCall(far)
				}
				if tt.stop {
					close(b.stop)
				}
			}()
			start := time.Now()
			close(started)
			got := b.linger([]*batchCall{newCall(tt.deadline)}, timer, start)
			if took := time.Since(start); len(got) != tt.want || took >= tt.within {
				t.Errorf("linger returned %d requests after %v, want %d within %v", len(got), took, tt.want, tt.within)
			}
		})
	}
}
