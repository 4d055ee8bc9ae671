package redisstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

func newBatched(t *testing.T, o BatchOptions) *Store {
	t.Helper()
	srv := redistest.Start(t)
	s, err := NewBatched(srv.Client(t), Options{}, o)
	if err != nil || s.batch == nil {
		t.Fatalf("NewBatched over one node = %v, not batched", err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// A lone request is sent at once, also with a linger: the batch before it
// had no company. (Held, each call after the first would wait half the
// default 1 s Timeout.)
func TestBatcherLoneRequestIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	s := newBatched(t, BatchOptions{Linger: time.Hour})
	start := time.Now()
	defer func() {
		if took := time.Since(start); took >= 450*time.Millisecond {
			t.Errorf("3 lone calls took %v: some were held for company", took)
		}
	}()
	for i := range 3 {
		ok, res := storetest.Take(t, s, storetest.T0, storetest.Req("lone", 2, 1))
		if ok != (i < 2) || res[0].Count != uint64(min(i+1, 2)) {
			t.Errorf("call %d: %v %+v", i, ok, res[0])
		}
		if got := s.RoundTrips(); got != uint64(i+1) {
			t.Errorf("after %d calls: %d round trips, want %d", i+1, got, i+1)
		}
	}
}

func TestBatcherCoalescesAndStaysExact(t *testing.T) {
	t.Parallel()
	for _, o := range []BatchOptions{{}, {Linger: time.Millisecond}} {
		t.Run(fmt.Sprintf("linger=%v", o.Linger), func(t *testing.T) {
			t.Parallel()
			s := newBatched(t, o)
			const workers, each, limit = 32, 25, 300
			admitted := storetest.AdmitConcurrently(t, workers, each, storetest.Taking(storetest.T0, []window.Counter{storetest.Req("batched", limit, 1)}, s))
			if admitted != limit {
				t.Errorf("admitted %d of %d, want exactly %d", admitted, workers*each, limit)
			}
			rt := s.RoundTrips()
			t.Logf("%d decisions in %d round trips (%.3f per decision)", workers*each, rt, float64(rt)/float64(workers*each))
			if rt >= workers*each {
				t.Errorf("%d round trips for %d concurrent decisions: nothing was coalesced", rt, workers*each)
			}
		})
	}
}

func TestBatcherSkipsEndedContextsAndCloses(t *testing.T) {
	t.Parallel()
	s := newBatched(t, BatchOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Take(ctx, storetest.T0, []window.Counter{storetest.Req("ended", 5, 1)}, make([]window.Result, 1)); !errors.Is(err, context.Canceled) {
		t.Errorf("Take with an ended context = %v, want context.Canceled", err)
	}
	if _, res := storetest.Take(t, s, storetest.T0, storetest.Req("ended", 5, 0)); res[0].Count != 0 {
		t.Errorf("count = %d after an unsent command, want 0", res[0].Count)
	}
	s.Close()
	_, err := s.Take(context.Background(), storetest.T0, []window.Counter{storetest.Req("closed", 5, 1)}, make([]window.Result, 1))
	if !errors.Is(err, ErrBatcherClosed) || !errors.Is(err, window.ErrStore) {
		t.Errorf("Take after Close = %v, want ErrBatcherClosed wrapping ErrStore", err)
	}
}

// TestNewBatchedRefusesNegativeOptions: zero takes the defaults, a negative
// value is a mistake.
func TestNewBatchedRefusesNegativeOptions(t *testing.T) {
	t.Parallel()
	for _, o := range []BatchOptions{{Workers: -1}, {MaxBatch: -1}, {Linger: -time.Millisecond}} {
		if s, err := NewBatched(nil, Options{}, o); err == nil || s != nil {
			t.Errorf("NewBatched(%+v) = %v, %v, want an error", o, s, err)
		}
	}
}
