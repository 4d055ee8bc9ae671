package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
)

// fakeStart is a startupWait's world: a store that fails its first fails
// pings, and a clock that the waits move on.
type fakeStart struct {
	now    time.Time
	fails  int
	pings  int
	waited []time.Duration
}

func (f *fakeStart) wait(t *testing.T, cfg startupConfig, interval time.Duration, jitter float64) *startupWait {
	w := newStartupWait(cfg, interval, func(context.Context) error {
		f.pings++
		if f.pings <= f.fails {
			return errors.New("dial tcp: connection refused")
		}
		return nil
	}, zaptest.NewLogger(t))
	w.now = func() time.Time { return f.now }
	w.after = func(d time.Duration) <-chan time.Time {
		f.waited = append(f.waited, d)
		f.now = f.now.Add(d)
		c := make(chan time.Time, 1)
		c <- f.now
		return c
	}
	w.jitter = func() float64 { return jitter }
	return w
}

// TestStartupWait: the spaces between start-up pings, and when the wait
// gives up, for the reference's settings and this project's defaults.
func TestStartupWait(t *testing.T) {
	t.Parallel()
	const s = time.Second
	tests := []struct {
		name     string
		cfg      startupConfig
		jitter   float64
		fails    int
		want     []time.Duration // the waits
		wantPing int
		wantErr  bool
	}{
		{"answers at once", startupConfig{initial: s, max: 30 * s}, 0.999, 0, nil, 1, false},
		{"reference defaults, no jitter drawn", startupConfig{initial: s, max: 30 * s}, 0, 4, []time.Duration{s, s, s, s}, 5, false},
		// jitter 0.5: halfway between initial and initial·2^n.
		{"doubling, jittered", startupConfig{initial: s, max: 30 * s}, 0.5, 6, []time.Duration{s, 1500 * time.Millisecond, 2500 * time.Millisecond, 4500 * time.Millisecond, 8500 * time.Millisecond, 15500 * time.Millisecond}, 7, false},
		{"capped at max", startupConfig{initial: s, max: 5 * s}, 0.999999, 5, []time.Duration{s, 2 * s, 4 * s, 5 * s, 5 * s}, 6, false},
		{"max below initial: max, as the reference", startupConfig{initial: 10 * s, max: 3 * s}, 0.5, 2, []time.Duration{3 * s, 3 * s}, 3, false},
		{"health interval without initial", startupConfig{maxElapsed: time.Hour}, 0.5, 3, []time.Duration{2 * s, 2 * s, 2 * s}, 4, false},
		// Gives up at 10s: pings at 0, 1, 3, 7 and 10 (the last wait cut
		// short so the time is up at a ping, not after it).
		{"gives up", startupConfig{initial: s, max: 30 * s, maxElapsed: 10 * s}, 0.999999, 100, []time.Duration{s, 2 * s, 4 * s, 3 * s}, 5, true},
		{"answers at the last ping", startupConfig{initial: s, max: 30 * s, maxElapsed: 10 * s}, 0.999999, 4, []time.Duration{s, 2 * s, 4 * s, 3 * s}, 5, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeStart{now: time.Unix(1_800_000_000, 0), fails: tt.fails}
			err := f.wait(t, tt.cfg, 2*s, tt.jitter).run(context.Background())
			if (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, errStoreUnreachable)) {
				t.Errorf("run = %v, want error %v", err, tt.wantErr)
			}
			// Waits within a microsecond: the jitter is a float.
			got := make([]time.Duration, len(f.waited))
			for i, d := range f.waited {
				got[i] = d.Round(time.Millisecond)
			}
			if !slices.Equal(got, tt.want) || f.pings != tt.wantPing {
				t.Errorf("waits %v and %d pings, want %v and %d", got, f.pings, tt.want, tt.wantPing)
			}
		})
	}
}

// TestStartupWaitEndsWithContext: shutdown during the wait ends it with
// the context's error, which serve does not take for Redis's.
func TestStartupWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	w := newStartupWait(startupConfig{initial: time.Hour, max: time.Hour}, time.Second, func(context.Context) error {
		cancel()
		return errors.New("refused")
	}, zaptest.NewLogger(t))
	if err := w.run(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("run = %v, want context.Canceled", err)
	}
}

// TestRedisStartsLate starts the sidecar with the reference's start-up
// variables and a Redis that is not there yet: it serves at once, each
// call answered by its failure mode and health NOT_SERVING, and logs its
// retries; once a real redis-server comes up on that address, it is ready
// and decides from Redis.
func TestRedisStartsLate(t *testing.T) {
	t.Parallel()
	redis := redistest.Start(t)
	redis.Stop() // its address, with nothing listening
	s := startSidecar(t, []string{"-config", writeRules(t, goodRules(1)), "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-health-interval", "50ms"},
		map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redis.Addr, "REDIS_STARTUP_INITIAL_INTERVAL": "20ms", "REDIS_STARTUP_MAX_INTERVAL": "100ms"})
	c := rlsv3.NewRateLimitServiceClient(dial(t, s.grpcAddr))
	if _, err := askK(context.Background(), c); status.Code(err) != codes.Unavailable {
		t.Fatalf("ShouldRateLimit with Redis down = %v, want Unavailable (failure mode error)", err)
	}
	if code, _ := httpGet(t, "http://"+s.httpAddr+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("GET /readyz with Redis down = %d, want 503", code)
	}
	for deadline := time.Now().Add(10 * time.Second); s.log.count("redis not reachable at start: failure modes answer; retrying") < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than 3 retries logged in 10s; log:\n%s", s.log)
		}
	}

	redis.Restart(t)
	deadline := time.Now().Add(10 * time.Second)
	for code, _ := httpGet(t, "http://"+s.httpAddr+"/readyz"); code != http.StatusOK; code, _ = httpGet(t, "http://"+s.httpAddr+"/readyz") {
		if time.Now().After(deadline) {
			t.Fatalf("not ready 10s after Redis came up; log:\n%s", s.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if resp, err := askK(context.Background(), c); err != nil || resp.OverallCode != want {
			t.Fatalf("ShouldRateLimit with Redis up = %v, %v; want %v", resp.GetOverallCode(), err, want)
		}
	}
	if s.log.count("redis answered") != 1 {
		t.Errorf("want one \"redis answered\" line; log:\n%s", s.log)
	}
}

// TestRedisNeverStarts: with REDIS_STARTUP_MAX_ELAPSED_TIME, a Redis that
// never answers ends the run with an error naming it, after serving
// failure modes meanwhile, as the reference exits (there by a panic).
func TestRedisNeverStarts(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there
	log := &logBuffer{}
	start := time.Now()
	// Bounded, so that a sidecar that never gives up fails the test.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = run(ctx, []string{"-config", writeRules(t, goodRules(1)), "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0"},
		env(map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": addr, "REDIS_STARTUP_INITIAL_INTERVAL": "50ms",
			"REDIS_STARTUP_MAX_INTERVAL": "100ms", "REDIS_STARTUP_MAX_ELAPSED_TIME": "400ms"}), io.Discard, log)
	if !errors.Is(err, errStoreUnreachable) || !strings.Contains(err.Error(), "400ms") {
		t.Fatalf("run = %v, want %v after 400ms; log:\n%s", err, errStoreUnreachable, log)
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Errorf("run returned after %v, before the 400ms", d)
	}
	if _, _, ok := log.serving(); !ok || log.count("stopped") != 1 {
		t.Errorf("want it served, then shut down; log:\n%s", log)
	}
}
