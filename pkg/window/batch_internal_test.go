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
