package main

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// clockStartTimeout bounds the sync at start, which delays serving.
const clockStartTimeout = 2 * time.Second

// timeClient is the part of a go-redis client the clock uses. A cluster
// client sends TIME to one node: the replicas then agree with that node.
type timeClient interface {
	Time(ctx context.Context) *redis.TimeCmd
}

// startClock returns the clock the server reads once per request
// (envoyrls.Options.Now) when counters live in Redis: the Redis server's
// time, so that replicas on hosts with skewed clocks agree on the window. It
// syncs once before returning; if that fails it logs and the clock reads the
// local time until a later sync succeeds. A goroutine re-syncs every interval
// until ctx ends or stop is called; stop waits for it. An interval of 0 turns
// the clock off: now is time.Now. onOffset, if not nil, is told every measured
// offset (for a ratelimit_clock_offset_seconds gauge).
func startClock(ctx context.Context, client timeClient, interval time.Duration, log *zap.Logger, onOffset func(time.Duration)) (now func() time.Time, stop func(), err error) {
	if interval == 0 {
		log.Info("clock sync off: windows follow this host's clock; replicas must keep their clocks in step")
		return time.Now, func() {}, nil
	}
	c, err := window.NewClock(client, window.ClockOptions{Interval: interval, Logger: log, OnOffset: onOffset})
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
