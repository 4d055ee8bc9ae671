package redisstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// heldRedis is a real client whose script calls are held on their way to
// Redis until the test lets each go: a Redis as far away as the test
// wants, without a clock. Each call held shows on arrived, with the channel
// that lets it go.
type heldRedis struct {
	scripter
	arrived chan chan struct{}
	done    chan struct{} // closed at the end of the test: nothing is held
}

// heldBatched returns a batched store with options o over a heldRedis; at
// the end of the test it lets every held call go and closes the store.
func heldBatched(t *testing.T, o BatchOptions) (*Store, *heldRedis) {
	t.Helper()
	h := &heldRedis{scripter: redistest.Start(t).Client(t), arrived: make(chan chan struct{}, 16), done: make(chan struct{})}
	s := mustBatched(t, h, Options{Timeout: time.Minute}, o)
	t.Cleanup(func() {
		close(h.done)
		_ = s.Close()
	})
	if err := s.Ping(context.Background()); err != nil { // loads the script: no NOSCRIPT round trip
		t.Fatal(err)
	}
	return s, h
}

func (h *heldRedis) Process(ctx context.Context, cmd redis.Cmder) error {
	release := make(chan struct{})
	select {
	case h.arrived <- release:
		select {
		case <-release:
		case <-h.done:
		}
	case <-h.done:
	}
	return h.scripter.Process(ctx, cmd)
}

// await returns the release of the next script call to reach Redis, or
// fails the test if none comes within a generous scheduling bound.
func (h *heldRedis) await(t *testing.T, what string) chan struct{} {
	t.Helper()
	select {
	case r := <-h.arrived:
		return r
	case <-time.After(5 * time.Second):
		t.Fatalf("%s never reached Redis", what)
		return nil
	}
}

// quiet checks that no further script call reaches Redis while the test
// holds the others: a scheduling wait, not a clock; a call that should not
// leave and does shows here.
func (h *heldRedis) quiet(t *testing.T, what string) {
	t.Helper()
	select {
	case <-h.arrived:
		t.Fatalf("%s reached Redis", what)
	case <-time.After(100 * time.Millisecond):
	}
}

// takeAsync runs one Take of key in the background; wait returns its error.
func takeAsync(s *Store, key string) (wait func() error) {
	var err error
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err = s.Take(context.Background(), storetest.T0, []window.Counter{storetest.Req(key, 100, 1)}, make([]window.Result, 1))
	})
	return func() error { wg.Wait(); return err }
}

// TestBatchDoesNotWaitTwoRoundTrips: with the default options, a request
// that arrives while a batch is out, and stays out longer than the spacing
// (Redis far away), goes out in a call of its own beside it: it waits one
// round trip, its own, not the one in flight as well. With one call in
// flight at a time it would reach Redis only after the first came back:
// about two round trips.
func TestBatchDoesNotWaitTwoRoundTrips(t *testing.T) {
	t.Parallel()
	s, h := heldBatched(t, BatchOptions{})
	first := takeAsync(s, "first")
	releaseFirst := h.await(t, "the first request")
	second := takeAsync(s, "second")
	releaseSecond := h.await(t, "a request arriving while a slow batch is out, before that batch came back,")
	close(releaseSecond)
	if err := second(); err != nil {
		t.Fatal(err)
	}
	close(releaseFirst)
	if err := first(); err != nil {
		t.Fatal(err)
	}
	if got := s.RoundTrips(); got != 2 {
		t.Errorf("round trips %d, want 2: one call each", got)
	}
}

// TestBatchGathersWhileACallIsOut: while a call is out for less than the
// spacing (Redis near), the requests that arrive gather into one batch,
// which leaves when the call comes back: the batches of one worker.
func TestBatchGathersWhileACallIsOut(t *testing.T) {
	t.Parallel()
	s, h := heldBatched(t, BatchOptions{Spacing: time.Hour})
	first := takeAsync(s, "first")
	releaseFirst := h.await(t, "the first request")
	var rest []func() error
	for _, k := range []string{"a", "b", "c"} {
		rest = append(rest, takeAsync(s, k))
	}
	// The gatherer holds one of the three; two wait in the queue.
	for deadline := time.Now().Add(5 * time.Second); len(s.batch.queue) < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests queued, want 2", len(s.batch.queue))
		}
	}
	h.quiet(t, "a second call, while the first is out for less than the spacing,")
	close(releaseFirst)
	close(h.await(t, "the gathered batch"))
	for _, wait := range append(rest, first) {
		if err := wait(); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.RoundTrips(); got != 2 {
		t.Errorf("round trips %d, want 2: the three gathered requests in one call", got)
	}
}

// TestBatchWorkersCapCallsInFlight: however long the calls are out, no more
// than Workers are in flight; the next request leaves when one comes back.
func TestBatchWorkersCapCallsInFlight(t *testing.T) {
	t.Parallel()
	s, h := heldBatched(t, BatchOptions{Workers: 2, Spacing: time.Nanosecond})
	a := takeAsync(s, "a")
	releaseA := h.await(t, "the first request")
	b := takeAsync(s, "b")
	releaseB := h.await(t, "the second request, beside the first")
	c := takeAsync(s, "c")
	h.quiet(t, "a third call with two workers both out")
	close(releaseA)
	close(h.await(t, "the third request, once a call came back"))
	close(releaseB)
	for _, wait := range []func() error{a, b, c} {
		if err := wait(); err != nil {
			t.Fatal(err)
		}
	}
}
