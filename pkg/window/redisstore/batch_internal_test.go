package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// TestBatchDecidesEachRequestAlone sends one hand-built batch, so the
// requests are certain to share one script call, and checks they are decided
// one by one as separate calls would be: a denied request counts nothing and
// does not deny its neighbours, a corrupt counter fails only its own
// request, each counter gets its own rule's limit and hits though the call
// lists each rule once, requests in the script's full form (sliding, shadow)
// between short-form ones are decided alike, and a Take whose deadline
// passed while it queued is not sent and counts nothing.
func TestBatchDecidesEachRequestAlone(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	s := mustBatched(t, client, Options{}, BatchOptions{Workers: 1})
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil { // loads the script: no NOSCRIPT round trip
		t.Fatal(err)
	}
	now := time.UnixMilli(1_763_800_035_000)
	r := func(key string, limit, hits uint64) window.Counter {
		return window.Counter{Key: "test:{" + key + "}", Limit: limit, Size: time.Minute, Hits: hits}
	}
	sliding := window.Counter{Key: "test:{sliding}", Limit: 5, Size: time.Minute, Hits: 2, Algorithm: window.SlidingWindow}
	shadow := window.Counter{Key: "test:{other}", Limit: 1, Size: time.Minute, Hits: 1, Shadow: true}
	corrupt := string(window.AppendWindow([]byte("test:{corrupt}"), window.At(now, time.Minute)))
	if err := client.Set(ctx, corrupt, "not a number", 0).Err(); err != nil {
		t.Fatal(err)
	}
	calls := [][]window.Counter{
		{r("full", 1, 1)},
		{r("full", 1, 1)},                   // denied: the first took the only hit
		{r("other", 5, 1), r("full", 1, 1)}, // denied as a whole: other not counted
		{r("corrupt", 5, 1)},                // fails alone
		{r("other", 5, 1)},                  // counted: 1
		{sliding},                           // full form: counted 2
		{shadow},                            // full form: over its limit, allowed, counted: 2
		{r("three", 9, 3), r("more", 9, 4)}, // rules of their own: counted 3 and 4
		{r("three", 9, 7)},                  // denied: 3 + 7 > 9
		{r("expired", 5, 1)},                // its deadline passed: not sent
	}
	const expired = 9
	var batch []*pending
	for i, reqs := range calls {
		deadline := time.Now().Add(time.Second)
		if i == expired {
			deadline = time.Now().Add(-time.Millisecond)
		}
		batch = append(batch, &pending{ctx: ctx, deadline: deadline, take: newTake(now.UnixMilli(), reqs, nil), done: make(chan struct{}, 1)})
	}
	before := s.RoundTrips()
	buf := &sendBuf{}
	s.batch.send(batch, buf)
	if len(buf.live) != len(calls)-1 || s.RoundTrips()-before != 1 {
		t.Fatalf("sent %d calls in %d round trips, want %d in 1", len(buf.live), s.RoundTrips()-before, len(calls)-1)
	}
	if err := batch[expired].err; !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, window.ErrStore) {
		t.Errorf("expired call: err %v, want ErrStore wrapping context.DeadlineExceeded", err)
	}
	expiredKey := string(window.AppendWindow([]byte("test:{expired}"), window.At(now, time.Minute)))
	if n, err := client.Exists(ctx, expiredKey).Result(); err != nil || n != 0 {
		t.Errorf("the expired call's counter exists (%d, %v): it was counted", n, err)
	}
	wantOK := []bool{true, false, false, false, true, true, true, true, false}
	for i, c := range batch[:expired] {
		res := make([]window.Result, len(calls[i]))
		allowed, err := false, c.err
		if err == nil {
			allowed, err = parseRequest(c.vals, &c.take, res)
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
		if i == 5 && res[0].Count != 2 {
			t.Errorf("sliding count = %d, want 2", res[0].Count)
		}
		if i == 6 && (res[0].Count != 2 || !res[0].Over) {
			t.Errorf("shadow result %+v, want count 2, over its limit of 1", res[0])
		}
		if i == 7 && (res[0].Count != 3 || res[1].Count != 4) {
			t.Errorf("counts %+v, want 3 and 4: each counter takes its own rule's hits", res)
		}
		if i == 8 && (res[0].Count != 3 || !res[0].Over) {
			t.Errorf("result %+v, want count 3 over the limit of 9", res[0])
		}
	}
}

// TestBatchLingerFor: a batch waits Linger, or half the time left to its
// earliest deadline if that is sooner, and not at all once one has passed.
func TestBatchLingerFor(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_763_800_035_000)
	b := &batcher{opts: BatchOptions{Linger: 200 * time.Microsecond}}
	for _, tt := range []struct {
		name      string
		deadlines []time.Duration // from now, one per request
		want      time.Duration
	}{
		{"far deadlines", []time.Duration{time.Second, time.Hour}, 200 * time.Microsecond},
		{"one deadline near", []time.Duration{time.Second, 300 * time.Microsecond}, 150 * time.Microsecond},
		{"one deadline passed", []time.Duration{time.Second, -time.Millisecond}, -500 * time.Microsecond},
	} {
		var batch []*pending
		for _, d := range tt.deadlines {
			batch = append(batch, &pending{deadline: now.Add(d)})
		}
		if got := b.lingerFor(batch, now); got != tt.want {
			t.Errorf("%s: lingerFor = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// newTestBatcher is a batcher with no store and no workers, for driving its
// steps by hand.
func newTestBatcher(maxBatch int, linger time.Duration) *batcher {
	return newBatcher(BatchOptions{Workers: 1, MaxBatch: maxBatch, Linger: linger, Spacing: DefaultBatchSpacing})
}

// fakeAfter stands in for a worker's timer: each wait is sent on waits, and
// ends when the test sends on fire.
type fakeAfter struct {
	waits chan time.Duration
	fire  chan time.Time
}

func newFakeAfter() *fakeAfter {
	return &fakeAfter{waits: make(chan time.Duration, 1), fire: make(chan time.Time)}
}

func (f *fakeAfter) after(d time.Duration) <-chan time.Time {
	f.waits <- d
	return f.fire
}

// TestBatchNext: a worker lingers when its first request was already
// waiting and its previous batch held more than one, and takes in what comes
// meanwhile; a worker that had to wait for its first request is idle and
// sends it at once, however large its previous batch was.
func TestBatchNext(t *testing.T) {
	t.Parallel()
	const linger = 300 * time.Millisecond
	far := time.Now().Add(time.Hour)

	t.Run("busy", func(t *testing.T) {
		b, clock := newTestBatcher(8, linger), newFakeAfter()
		b.queue <- &pending{deadline: far}
		b.queue <- &pending{deadline: far}
		late := &pending{deadline: far}
		done := make(chan []*pending, 1)
		go func() {
			got, _ := b.next(nil, 2, clock.after)
			done <- got
		}()
		select {
		case d := <-clock.waits:
			if d != linger {
				t.Errorf("lingers %v, want %v", d, linger)
			}
		case got := <-done:
			t.Fatalf("next returned %d requests without lingering", len(got))
		}
		b.queue <- late // joins only because the worker lingers
		clock.fire <- time.Now()
		if got := <-done; len(got) != 3 || got[2] != late {
			t.Errorf("next = %d requests, want 3: the one that came while it lingered too", len(got))
		}
	})

	t.Run("idle after a large batch", func(t *testing.T) {
		b, clock := newTestBatcher(8, linger), newFakeAfter()
		done := make(chan []*pending, 1)
		go func() {
			got, _ := b.next(nil, 5, clock.after)
			done <- got
		}()
		// A scheduling wait, not a clock: next must find the queue empty
		// and block on it before the request comes. No timer decides the
		// outcome; a worker that lingers shows on clock.waits.
		time.Sleep(200 * time.Millisecond)
		b.queue <- &pending{deadline: far}
		select {
		case got := <-done:
			if len(got) != 1 {
				t.Errorf("next = %d requests, want 1", len(got))
			}
		case d := <-clock.waits:
			t.Errorf("an idle worker lingered %v for its lone request", d)
		}
	})

	t.Run("closed", func(t *testing.T) {
		b, clock := newTestBatcher(8, linger), newFakeAfter()
		close(b.stop)
		if _, ok := b.next(nil, 5, clock.after); ok {
			t.Error("next on a closed batcher: ok, want not ok")
		}
	})
}

// TestBatchLinger drives a worker's linger step alone, with no Redis: after
// its wait it takes in what queued meanwhile; with no time to wait it
// returns the batch as it is; Close ends the wait.
func TestBatchLinger(t *testing.T) {
	t.Parallel()
	first, late := &pending{}, &pending{}

	b, clock := newTestBatcher(4, 0), newFakeAfter()
	done := make(chan []*pending, 1)
	go func() { done <- b.linger([]*pending{first}, clock.after, time.Millisecond) }()
	<-clock.waits
	b.queue <- late // while it waits
	clock.fire <- time.Now()
	if got := <-done; len(got) != 2 || got[1] != late {
		t.Errorf("after its wait, linger returned %d requests, want 2: the one queued meanwhile too", len(got))
	}

	b, clock = newTestBatcher(4, 0), newFakeAfter()
	b.queue <- late
	if got := b.linger([]*pending{first}, clock.after, 0); len(got) != 1 || len(clock.waits) != 0 {
		t.Errorf("with no time to wait, linger returned %d requests (waited: %v), want the batch as it was",
			len(got), len(clock.waits) != 0)
	}

	b, clock = newTestBatcher(4, 0), newFakeAfter()
	close(b.stop)
	if n := len(b.linger([]*pending{first}, clock.after, time.Hour)); n != 1 {
		t.Errorf("linger at Close returned %d requests, want 1", n)
	}
}
