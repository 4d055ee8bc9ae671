package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// clockStartTimeout bounds the sync at start, which delays serving.
const clockStartTimeout = 2 * time.Second

// timeClient is the part of a go-redis client the clock uses.
type timeClient interface {
	Time(ctx context.Context) *redis.TimeCmd
}

// clockKey names the Redis Cluster slot whose master every replica asks for
// the time.
const clockKey = "ratelimit-clock"

// clusterTime sends TIME to the master of clockKey's slot. go-redis would
// send a keyless TIME to the shards in turn, so replicas would each follow a
// mix of nodes and agree only to within the nodes' own skew; asking one node
// makes them agree with it, and a failover moves them all to the new master.
type clusterTime struct{ c *redis.ClusterClient }

func (ct clusterTime) Time(ctx context.Context) *redis.TimeCmd {
	node, err := ct.c.MasterForKey(ctx, clockKey)
	if err != nil {
		cmd := redis.NewTimeCmd(ctx, "time")
		cmd.SetErr(err)
		return cmd
	}
	return node.Time(ctx)
}

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
// the time is that of one master (see clusterTime).
func startClock(ctx context.Context, client timeClient, interval time.Duration, log *zap.Logger, offset prometheus.Gauge) (now func() time.Time, stop func(), err error) {
	if interval == 0 {
		log.Info("clock sync off: windows follow this host's clock; replicas must keep their clocks in step")
		return time.Now, func() {}, nil
	}
	if cc, ok := client.(*redis.ClusterClient); ok {
		client = clusterTime{cc}
	}
	opts := window.ClockOptions{Interval: interval, Logger: log.Sugar()}
	if offset != nil {
		opts.OnOffset = func(d time.Duration) { offset.Set(d.Seconds()) }
	}
	c, err := window.NewClock(client, opts)
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
