package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window/redisstore"
)

// tolerance is how far a measured offset may be from the truth against a
// local redis-server: generous for a loaded CI machine under -race, yet far
// below the skews the tests inject.
const tolerance = 50 * time.Millisecond

// fakeTimer answers TIME from a script of replies, in order.
type fakeTimer struct {
	mu      sync.Mutex
	replies []any // time.Time or error
}

func (f *fakeTimer) Time(ctx context.Context) *redis.TimeCmd {
	f.mu.Lock()
	defer f.mu.Unlock()
	cmd := redis.NewTimeCmd(ctx, "time")
	if len(f.replies) == 0 {
		cmd.SetErr(errors.New("fake: no more replies"))
		return cmd
	}
	r := f.replies[0]
	f.replies = f.replies[1:]
	switch r := r.(type) {
	case time.Time:
		cmd.SetVal(r)
	case error:
		cmd.SetErr(r)
	}
	return cmd
}

// localSeq returns a local clock that reads the given instants (ms after
// base) in order, then stays at the last.
func localSeq(base time.Time, ms ...int64) func() time.Time {
	var mu sync.Mutex
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t := base.Add(time.Duration(ms[0]) * time.Millisecond)
		if len(ms) > 1 {
			ms = ms[1:]
		}
		return t
	}
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

func TestNewClockValidates(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		client *fakeTimer
		opts   redisstore.ClockOptions
	}{
		{"nil client", nil, redisstore.ClockOptions{}},
		{"negative interval", &fakeTimer{}, redisstore.ClockOptions{Interval: -time.Second}},
		{"negative samples", &fakeTimer{}, redisstore.ClockOptions{Samples: -1}},
		{"negative warn", &fakeTimer{}, redisstore.ClockOptions{WarnAbove: -time.Second}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var client interface {
				Time(context.Context) *redis.TimeCmd
			}
			if tt.client != nil {
				client = tt.client
			}
			if _, err := redisstore.NewClock(client, tt.opts); !errors.Is(err, redisstore.ErrClock) {
				t.Errorf("NewClock = %v, want ErrClock", err)
			}
		})
	}
}

// TestClockSyncPicksShortestRoundTrip feeds three samples of a server 5 s
// ahead. The slow samples' replies were stamped off-centre, so only the
// fastest one gives the true offset.
func TestClockSyncPicksShortestRoundTrip(t *testing.T) {
	t.Parallel()
	base := time.UnixMilli(1_763_800_020_000)
	server := func(localMs int64) time.Time {
		return base.Add(5*time.Second + time.Duration(localMs)*time.Millisecond)
	}
	f := &fakeTimer{replies: []any{server(90), server(201), server(305)}}
	core, logs := observer.New(zapcore.DebugLevel)
	var reported []time.Duration
	c, err := redisstore.NewClock(f, redisstore.ClockOptions{
		Local:    localSeq(base, 0, 100, 200, 202, 300, 340, 1000),
		Samples:  3,
		Logger:   zap.New(core).Sugar(),
		OnOffset: func(d time.Duration) { reported = append(reported, d) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Sync(context.Background()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if got, want := c.Offset(), 5*time.Second; got != want {
		t.Errorf("Offset() = %v, want %v", got, want)
	}
	if got, want := c.Now(), base.Add(6*time.Second); !got.Equal(want) {
		t.Errorf("Now() = %v, want %v", got, want)
	}
	if len(reported) != 1 || reported[0] != 5*time.Second {
		t.Errorf("OnOffset got %v, want [5s]", reported)
	}
	if n := logs.FilterLevelExact(zapcore.WarnLevel).Len(); n != 1 {
		t.Errorf("%d warnings for a 5 s offset, want 1", n)
	}
}

func TestClockSyncFailures(t *testing.T) {
	t.Parallel()
	base := time.UnixMilli(1_763_800_020_000)
	boom := errors.New("connection refused")

	t.Run("every sample fails", func(t *testing.T) {
		t.Parallel()
		c, err := redisstore.NewClock(&fakeTimer{replies: []any{boom, boom}}, redisstore.ClockOptions{Local: localSeq(base, 0), Samples: 2})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Sync(context.Background()); !errors.Is(err, window.ErrStore) || !errors.Is(err, boom) {
			t.Errorf("Sync = %v, want ErrStore wrapping %v", err, boom)
		}
		if c.Offset() != 0 || !c.Now().Equal(base) {
			t.Errorf("after a failed first sync Offset() = %v, Now() = %v, want 0 and the local time", c.Offset(), c.Now())
		}
	})
	t.Run("a second failure ends the sync", func(t *testing.T) {
		t.Parallel()
		f := &fakeTimer{replies: []any{boom, boom, base, base, base}}
		c, err := redisstore.NewClock(f, redisstore.ClockOptions{Local: localSeq(base, 0), Samples: 5})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Sync(context.Background()); !errors.Is(err, boom) {
			t.Errorf("Sync = %v, want %v", err, boom)
		}
		if n := len(f.replies); n != 3 {
			t.Errorf("Sync left %d of 5 replies, want 3: it should stop at the second failure", n)
		}
	})
	t.Run("a failed sample is skipped", func(t *testing.T) {
		t.Parallel()
		f := &fakeTimer{replies: []any{boom, base.Add(-2*time.Second + 11*time.Millisecond)}}
		c, err := redisstore.NewClock(f, redisstore.ClockOptions{Local: localSeq(base, 0, 1, 10, 12), Samples: 2, WarnAbove: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Sync(context.Background()); err != nil {
			t.Fatalf("Sync: %v", err)
		}
		if got, want := c.Offset(), -2*time.Second; got != want {
			t.Errorf("Offset() = %v, want %v", got, want)
		}
	})
}

// skewed returns a local clock that runs *skew ahead of the real one.
func skewed(skew *atomic.Int64) func() time.Time {
	return func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
}

func TestClockSyncRealRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := srv.Client(t)
	for _, skew := range []time.Duration{0, 7 * time.Second, -7 * time.Second} {
		t.Run(fmt.Sprint(skew), func(t *testing.T) {
			t.Parallel()
			var s atomic.Int64
			s.Store(int64(skew))
			c, err := redisstore.NewClock(client, redisstore.ClockOptions{Local: skewed(&s), Logger: zaptest.NewLogger(t).Sugar()})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Sync(context.Background()); err != nil {
				t.Fatalf("Sync: %v", err)
			}
			// redis-server runs on this host, so its clock is time.Now.
			if got := c.Offset(); abs(got+skew) > tolerance {
				t.Errorf("Offset() = %v, want %v ± %v", got, -skew, tolerance)
			}
			if d := time.Until(c.Now()); abs(d) > tolerance {
				t.Errorf("Now() - time.Now() = %v, want within %v", d, tolerance)
			}
		})
	}
}

// TestClockRunResyncsAfterRestart steps the local clock while Redis is down:
// Run must notice the failure, keep retrying and measure the new offset once
// Redis is back.
func TestClockRunResyncsAfterRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	var skew atomic.Int64
	skew.Store(int64(4 * time.Second))
	core, logs := observer.New(zapcore.InfoLevel)
	c, err := redisstore.NewClock(client, redisstore.ClockOptions{Local: skewed(&skew), Interval: 20 * time.Millisecond, Logger: zap.New(core).Sugar()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; offset %v", what, c.Offset())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	near := func(want time.Duration) func() bool {
		return func() bool { return abs(c.Offset()-want) <= tolerance }
	}
	waitFor("the first sync", near(-4*time.Second))

	srv.Stop()
	skew.Store(int64(-3 * time.Second)) // the host clock steps while Redis is away
	waitFor("a failed sync", func() bool { return logs.FilterMessageSnippet("failed").Len() > 0 })
	if got := c.Offset(); abs(got+4*time.Second) > tolerance {
		t.Errorf("Offset() while Redis is down = %v, want the last good offset, -4s", got)
	}
	srv.Restart(t)
	waitFor("a sync after the restart", near(3*time.Second))
	waitFor("the recovery log", func() bool { return logs.FilterMessageSnippet("recovered").Len() > 0 })
}

// TestClockTwoReplicasAgreeOnTheWindow runs two replicas, each with its own
// client and Redis store, on hosts whose clocks are 3 s fast and 2 s slow.
// With a 5 s window, the uncorrected clocks are exactly one window apart
// whatever the real time, so each replica counts in its own window and the
// pair admits twice the limit. Reading the time through a Clock puts both in
// the same window and the pair admits exactly the limit.
func TestClockTwoReplicasAgreeOnTheWindow(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const limit = 10
	size := 5 * time.Second
	ctx := context.Background()

	type replica struct {
		store *redisstore.Store
		local func() time.Time
		clock *redisstore.Clock
	}
	var replicas []replica
	for _, skew := range []time.Duration{3 * time.Second, -2 * time.Second} {
		var s atomic.Int64
		s.Store(int64(skew))
		client := srv.Client(t)
		c, err := redisstore.NewClock(client, redisstore.ClockOptions{Local: skewed(&s), Logger: zaptest.NewLogger(t).Sugar()})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Sync(ctx); err != nil {
			t.Fatalf("Sync: %v", err)
		}
		replicas = append(replicas, replica{redisstore.New(client, redisstore.Options{}), skewed(&s), c})
	}
	if d := replicas[0].clock.Now().Sub(replicas[1].clock.Now()); abs(d) > tolerance {
		t.Fatalf("the corrected clocks differ by %v, want within %v", d, tolerance)
	}

	// admit alternates 3*limit calls between the replicas and returns how
	// many were allowed and whether every call fell in one window.
	admit := func(key string, now func(i int) time.Time) (admitted int, oneWindow bool) {
		r := []window.Counter{{Key: "clock:{" + key + "}", Limit: limit, Size: size, Hits: 1}}
		res := make([]window.Result, 1)
		var first window.Window
		oneWindow = true
		for i := range 3 * limit {
			at := now(i)
			w := window.At(at, size)
			if i == 0 {
				first = w
			}
			oneWindow = oneWindow && w == first
			ok, err := replicas[i%2].store.Take(ctx, at, r, res)
			if err != nil {
				t.Fatalf("Take: %v", err)
			}
			if ok {
				admitted++
			}
		}
		return admitted, oneWindow
	}

	// The real time may cross a boundary mid-run (or fall within the
	// clocks' error of one); a new attempt with a new key is then clear of
	// it, since boundaries are 5 s apart.
	var corrected int
	for attempt := 0; ; attempt++ {
		n, one := admit(fmt.Sprint("corrected", attempt), func(i int) time.Time { return replicas[i%2].clock.Now() })
		if one {
			corrected = n
			break
		}
		if attempt == 2 {
			t.Fatal("three runs each straddled a window boundary")
		}
	}
	uncorrected, _ := admit("uncorrected", func(i int) time.Time { return replicas[i%2].local() })
	t.Logf("admitted of %d calls with limit %d: %d with the clock, %d with the skewed local clocks", 3*limit, limit, corrected, uncorrected)
	if corrected != limit {
		t.Errorf("with the clock the replicas admitted %d, want exactly the limit %d", corrected, limit)
	}
	if uncorrected <= limit {
		t.Errorf("without the clock the replicas admitted %d, want more than the limit %d (else the test shows nothing)", uncorrected, limit)
	}
}

// TestClockAsksOneNode syncs a Clock over each topology's client, as the
// sidecar makes it, and checks that every TIME went to one master: behind
// Sentinel the master, not its replica; on a cluster one master of three,
// where go-redis alone would send a keyless TIME to the shards in turn.
func TestClockAsksOneNode(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		start func(t *testing.T) (client redis.UniversalClient, nodes []*redistest.Server)
	}{
		{"single", func(t *testing.T) (redis.UniversalClient, []*redistest.Server) {
			srv := redistest.Start(t)
			return srv.Client(t), []*redistest.Server{srv}
		}},
		{"sentinel", func(t *testing.T) (redis.UniversalClient, []*redistest.Server) {
			s := redistest.StartSentinel(t)
			return s.FailoverClient(t), []*redistest.Server{s.Master, s.Replica}
		}},
		{"cluster", func(t *testing.T) (redis.UniversalClient, []*redistest.Server) {
			c := redistest.StartCluster(t, 3)
			return c.Client(t), []*redistest.Server{c.Node(0), c.Node(1), c.Node(2)}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			client, nodes := tt.start(t)
			c, err := redisstore.NewClock(client, redisstore.ClockOptions{Logger: zaptest.NewLogger(t).Sugar()})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Sync(ctx); err != nil {
				t.Fatalf("Sync: %v", err)
			}
			if d := time.Until(c.Now()); abs(d) > tolerance {
				t.Errorf("Now() - time.Now() = %v, want within %v", d, tolerance)
			}
			var calls []int64
			asked := 0
			for _, n := range nodes {
				st, err := n.CommandStats(ctx)
				if err != nil {
					t.Fatal(err)
				}
				calls = append(calls, st["time"])
				if st["time"] > 0 {
					asked++
				}
			}
			if asked != 1 || (calls[0] == 0 && tt.name != "cluster") {
				t.Errorf("TIME calls per node = %v, want all on one (the master, listed first, unless a cluster)", calls)
			}
		})
	}
}
