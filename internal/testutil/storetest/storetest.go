// Package storetest holds what the tests of window's stores share: a start
// time and request and Take helpers, and driving one or more stores from
// many goroutines and counting what they admit.
package storetest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// T0 is the start of a minute window, so tests know where boundaries are.
var T0 = time.UnixMilli(1_763_800_020_000)

// Req returns a fixed-window request of hits on a minute counter of limit,
// whose key is key in a hash tag.
func Req(key string, limit uint64, hits uint64) window.Counter {
	return window.Counter{Key: "test:{" + key + "}", Limit: limit, Size: time.Minute, Hits: hits}
}

// Take takes reqs from s at now and returns the answer; an error fails the
// test.
func Take(t testing.TB, s window.Store, now time.Time, reqs ...window.Counter) (bool, []window.Result) {
	t.Helper()
	res := make([]window.Result, len(reqs))
	ok, err := s.Take(context.Background(), now, reqs, res)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	return ok, res
}

// AdmitConcurrently calls take from workers goroutines, each times, with
// the goroutine's number, and returns how many calls were allowed; an error
// fails the test.
func AdmitConcurrently(t testing.TB, workers, each int, take func(worker int) (bool, error)) int {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range each {
				ok, err := take(w)
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return int(admitted.Load())
}

// Taking returns a take for AdmitConcurrently that sends reqs at now through
// the stores in turn, by worker number (replicas sharing one Redis).
func Taking[S window.Store](now time.Time, reqs []window.Counter, stores ...S) func(int) (bool, error) {
	return func(w int) (bool, error) {
		return stores[w%len(stores)].Take(context.Background(), now, reqs, make([]window.Result, len(reqs)))
	}
}
