package main

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// counters is the counter store the server is handed, with its clock and
// what the metrics read of it.
type counters struct {
	store window.Store
	// now is the clock of windows: the Redis server's (see startClock),
	// or time.Now for the in-memory store, which is one replica.
	now func() time.Time
	// poolStats and roundTrips are nil for the in-memory store.
	poolStats   func() *metrics.PoolStats
	roundTrips  func() uint64
	breakerOpen func() bool
	// client is the Redis client the store uses, for the RLQS ledger; nil
	// for the in-memory store.
	client redis.UniversalClient
	// close stops the clock, then closes the store and its client.
	close func() error
}

// newCounters returns the in-memory store, or, when a -redis-* flag is
// given, the Redis store with its clock synced to the Redis server's;
// clockOffset is set at every sync. tracer, when not nil, makes a span of
// each Redis call.
func newCounters(ctx context.Context, o *options, log *zap.Logger, clockOffset prometheus.Gauge, tracer trace.Tracer) (*counters, error) {
	goRedisLogger.log.Store(log)
	if !o.usesRedis() {
		log.Warn("using the in-memory store: counters are not shared with other replicas; set -redis-url for a global limit")
		return &counters{
			store:       window.NewMemory(),
			now:         time.Now,
			breakerOpen: func() bool { return false },
			close:       func() error { return nil },
		}, nil
	}
	client, err := newRedisClient(o)
	if err != nil {
		return nil, err
	}
	now, stopClock, err := startClock(ctx, client, o.clockSync, log, clockOffset)
	if err != nil {
		client.Close()
		return nil, err
	}
	rs := newRedisStore(o, client, log, tracer)
	return &counters{
		store:       rs.Store, // the server calls the outermost layer itself, not through rs
		now:         now,
		poolStats:   func() *metrics.PoolStats { return poolStatsOf(client.PoolStats()) },
		roundTrips:  rs.RoundTrips,
		breakerOpen: rs.BreakerOpen,
		client:      client,
		close: func() error {
			stopClock() // first: it uses the client
			return errors.Join(rs.Close(), client.Close())
		},
	}, nil
}
