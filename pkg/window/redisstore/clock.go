package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// timer is the part of a go-redis client that Clock uses. A
// redis.UniversalClient (*redis.Client, a Sentinel failover client or a
// *redis.ClusterClient) has it; NewClock wraps a cluster client in
// clusterTime.
type timer interface {
	Time(ctx context.Context) *redis.TimeCmd
}

// clockKey names the Redis Cluster slot whose master every replica asks for
// the time.
const clockKey = "ratelimit-clock"

// clusterTime sends TIME to the master of clockKey's slot. go-redis would
// send a keyless TIME to the shards in turn, so replicas would each follow a
// mix of nodes and agree only to within the nodes' own skew; asking one node
// makes them agree with it, and a failover moves them all to the new master
// (the master is looked up on every call).
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

// Logger is the part of a structured logger that Clock logs through: a
// message and alternating keys and values. A *zap.SugaredLogger has it.
type Logger interface {
	Debugw(msg string, keysAndValues ...any)
	Infow(msg string, keysAndValues ...any)
	Warnw(msg string, keysAndValues ...any)
}

// nopLogger logs nothing.
type nopLogger struct{}

func (nopLogger) Debugw(string, ...any) {}
func (nopLogger) Infow(string, ...any)  {}
func (nopLogger) Warnw(string, ...any)  {}

// ClockOptions configures NewClock. The zero value uses every default.
type ClockOptions struct {
	// Local is the clock whose error Clock measures; default time.Now.
	Local func() time.Time
	// Interval is the time between syncs in Run; default 30 s. A failed
	// sync is retried after one second, or after Interval if that is
	// shorter, until one succeeds.
	Interval time.Duration
	// Samples is how many TIME round trips one Sync takes; the one with
	// the shortest round trip wins. Default 5.
	Samples int
	// WarnAbove is the offset above which (in either direction) a sync logs
	// a warning, since the host clock is then far off; default 250 ms.
	WarnAbove time.Duration
	// Logger receives sync failures and large offsets; default none.
	Logger Logger
	// OnOffset, if set, is called with the new offset after every
	// successful sync, for example to set a ratelimit_clock_offset_seconds
	// gauge. It runs on the syncing goroutine and must not block.
	OnOffset func(time.Duration)
}

const (
	defaultClockInterval = 30 * time.Second
	defaultClockSamples  = 5
	defaultClockWarn     = 250 * time.Millisecond
	// clockRetry is the pause before a failed sync is retried.
	clockRetry = time.Second
	// clockSyncTimeout bounds one Sync started by Run.
	clockSyncTimeout = 2 * time.Second
)

// ErrClock reports bad ClockOptions.
var ErrClock = errors.New("redisstore: clock")

// Clock is the time every replica of a service agrees on: the Redis
// server's clock, read through the local clock plus a measured offset.
// Windows are aligned to the Unix epoch, so replicas whose clocks disagree by
// d count a request in different windows for d around every boundary, and
// each admits its own limit there; reading one clock removes that.
//
// Sync measures the offset like NTP: it sends TIME a few times, keeps the
// sample with the shortest round trip and assumes the server read its clock
// halfway through it, so the error is at most half that round trip (well
// under a millisecond on a LAN; Redis reports microseconds). Between syncs
// the local clock's rate is trusted; ordinary drift (tens of ppm) moves it by
// about a millisecond per 30 s interval. On a single node or behind
// Sentinel the time is the master's; on Redis Cluster it is that of the
// master of one fixed slot (see clusterTime), so that every replica reads
// the same node's clock.
//
// The zero Clock is not usable; call NewClock. Before the first successful
// sync the offset is zero, so Now is the local clock. A Clock is safe for
// concurrent use, and Now and Offset take no lock.
type Clock struct {
	client timer
	opts   ClockOptions
	offset atomic.Int64 // nanoseconds to add to Local
	synced atomic.Bool  // some Sync has succeeded
}

// NewClock returns a Clock over client: a *redis.Client (one node or a
// Sentinel failover client), a *redis.ClusterClient, whose TIME then goes to
// one master (see Clock), or anything else with Time. It fails for a nil
// client or negative options.
func NewClock(client timer, opts ClockOptions) (*Clock, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", ErrClock)
	}
	if cc, ok := client.(*redis.ClusterClient); ok {
		client = clusterTime{cc}
	}
	if opts.Interval < 0 || opts.Samples < 0 || opts.WarnAbove < 0 {
		return nil, fmt.Errorf("%w: negative Interval, Samples or WarnAbove", ErrClock)
	}
	if opts.Local == nil {
		opts.Local = time.Now
	}
	if opts.Interval == 0 {
		opts.Interval = defaultClockInterval
	}
	if opts.Samples == 0 {
		opts.Samples = defaultClockSamples
	}
	if opts.WarnAbove == 0 {
		opts.WarnAbove = defaultClockWarn
	}
	if opts.Logger == nil {
		opts.Logger = nopLogger{}
	}
	return &Clock{client: client, opts: opts}, nil
}

// Now returns the local time corrected by the last measured offset. It has
// the signature of time.Now, for envoyrls.Options.Now.
func (c *Clock) Now() time.Time {
	return c.opts.Local().Add(time.Duration(c.offset.Load()))
}

// Offset returns the last measured offset: Redis time minus local time. It
// is zero before the first successful sync.
func (c *Clock) Offset() time.Duration {
	return time.Duration(c.offset.Load())
}

// clockMaxFailures is how many failed samples end a Sync: one is skipped,
// since a reconnecting client often fails its first command, but a server
// that is down should not hold Sync for Samples dial attempts.
const clockMaxFailures = 2

// Sync measures the offset now, with up to Samples round trips. A failed
// sample is skipped; Sync gives up at the second, or when ctx ends, and then
// fails unless an earlier sample succeeded. A failed Sync keeps the old
// offset.
func (c *Clock) Sync(ctx context.Context) error {
	var (
		best     time.Duration
		bestRTT  time.Duration = -1
		lastErr  error
		failures int
	)
	for range c.opts.Samples {
		send := c.opts.Local()
		server, err := c.client.Time(ctx).Result()
		recv := c.opts.Local()
		if err != nil {
			lastErr = err
			if failures++; failures >= clockMaxFailures || ctx.Err() != nil {
				break
			}
			continue
		}
		rtt := recv.Sub(send) // monotonic when Local is time.Now
		if rtt < 0 {
			continue // the local clock stepped back mid-sample
		}
		if bestRTT < 0 || rtt < bestRTT {
			bestRTT = rtt
			best = server.Sub(send.Add(rtt / 2))
		}
	}
	if bestRTT < 0 {
		if lastErr == nil {
			lastErr = errors.New("local clock went backwards in every sample")
		}
		return fmt.Errorf("%w: time: %w", window.ErrStore, lastErr)
	}
	c.offset.Store(int64(best))
	c.synced.Store(true)
	log := c.opts.Logger.Debugw
	if best > c.opts.WarnAbove || best < -c.opts.WarnAbove {
		log = c.opts.Logger.Warnw
	}
	log("clock offset to redis measured; the local clock is off by -offset",
		"offset", best, "rtt", bestRTT, "warn_above", c.opts.WarnAbove)
	if c.opts.OnOffset != nil {
		c.opts.OnOffset(best)
	}
	return nil
}

// Run syncs every Interval until ctx ends. It syncs at once if no sync has
// succeeded yet, and after a failure it retries every second (or Interval,
// if shorter) until a sync succeeds, so a Redis restart or reconnect is
// followed by a fresh measurement. It logs the first failure of a run of
// failures and the recovery.
func (c *Clock) Run(ctx context.Context) {
	retry := min(clockRetry, c.opts.Interval)
	wait := c.opts.Interval
	if !c.synced.Load() {
		wait = 0
	}
	failing := false
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sctx, cancel := context.WithTimeout(ctx, min(clockSyncTimeout, c.opts.Interval))
		err := c.Sync(sctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil && !failing:
			c.opts.Logger.Warnw("clock sync with redis failed: keeping the last offset, retrying",
				"offset", c.Offset(), "retry", retry, "error", err)
		case err == nil && failing:
			c.opts.Logger.Infow("clock sync with redis recovered", "offset", c.Offset())
		}
		failing = err != nil
		wait = c.opts.Interval
		if failing {
			wait = retry
		}
		t.Reset(wait)
	}
}
