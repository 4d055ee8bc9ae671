package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window/redisstore"
)

// clockStartTimeout bounds the sync at start, which delays serving.
const clockStartTimeout = 2 * time.Second

// newClockOffsetGauge returns ratelimit_clock_offset_seconds, for startClock
// to set after every sync.
func newClockOffsetGauge() prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ratelimit_clock_offset_seconds",
		Help: "Redis server time minus this host's time, as of the last clock sync; 0 before the first sync, with the in-memory store and with -clock-sync-interval=0.",
	})
}

// startClock returns the clock the server reads once per request
// (envoyrls.Options.Now) when counters live in Redis: the Redis server's
// time, so that replicas on hosts with skewed clocks agree on the window. It
// syncs once before returning; if that fails it logs and the clock reads the
// local time until a later sync succeeds. A goroutine re-syncs every interval
// until ctx ends or stop is called; stop waits for it. An interval of 0 turns
// the clock off: now is time.Now. offset, if not nil, is set to every
// measured offset in seconds (see newClockOffsetGauge). With a cluster client
// the time is that of one master (see redisstore.Clock).
func startClock(ctx context.Context, client redis.UniversalClient, interval time.Duration, log *zap.Logger, offset prometheus.Gauge) (now func() time.Time, stop func(), err error) {
	if interval == 0 {
		log.Info("clock sync off: windows follow this host's clock; replicas must keep their clocks in step")
		return time.Now, func() {}, nil
	}
	opts := redisstore.ClockOptions{Interval: interval, Logger: log.Sugar()}
	if offset != nil {
		opts.OnOffset = func(d time.Duration) { offset.Set(d.Seconds()) }
	}
	c, err := redisstore.NewClock(client, opts)
	if err != nil {
		return nil, nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, clockStartTimeout)
	err = c.Sync(sctx)
	cancel()
	if err != nil {
		log.Warn("clock sync with redis failed at start: using this host's clock until a sync succeeds", zap.Error(err))
	} else {
		log.Info("clock synced with redis", zap.Duration("offset", c.Offset()), zap.Duration("interval", interval))
	}
	rctx, cancelRun := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(rctx)
	}()
	return c.Now, func() { cancelRun(); <-done }, nil
}
