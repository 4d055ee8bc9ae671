package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"
)

// Redis unreachable at start.
//
// envoyproxy/ratelimit since its #1144 retries Redis at start, instead of
// dying, with a backoff (REDIS_STARTUP_INITIAL_INTERVAL, doubling with
// jitter up to REDIS_STARTUP_MAX_INTERVAL), serving nothing meanwhile, and
// dies when REDIS_STARTUP_MAX_ELAPSED_TIME (default 0: never) has passed.
//
// The sidecar serves at once whatever Redis does: gRPC and HTTP listen,
// each rule's failure mode answers while Redis cannot, and health says
// NOT_SERVING until the store answers. A pod whose Redis is down thus
// still answers Envoy within its timeout, as its rules say, rather than
// refusing connections; and a start never blocks on Redis. What the
// reference's settings shape here is the wait for Redis's first answer:
// how the start-up pings are spaced (the health loop's pings, which also
// make it ready) and when the sidecar gives up and exits with an error, so
// that an orchestrator restarts it. The counting path is not held back:
// each call reaches for Redis itself, so decisions come from Redis as soon
// as it answers, whatever the backoff.

// startupConfig is the wait for Redis's first answer at start.
type startupConfig struct {
	// initial spaces the start-up pings from this interval, doubling up
	// to max, each jittered; 0 spaces them by -health-interval.
	initial, max time.Duration
	// maxElapsed is how long after start Redis may go unanswered before
	// the sidecar exits with an error; 0 waits for ever.
	maxElapsed time.Duration
}

func (c *startupConfig) addFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.initial, "redis-startup-initial-interval", 0, "until Redis first answers, space the start-up pings from this interval, doubling with jitter up to -redis-startup-max-interval; 0 pings every -health-interval. The sidecar serves meanwhile, its failure modes answering")
	fs.DurationVar(&c.max, "redis-startup-max-interval", 30*time.Second, "the longest space between start-up pings of Redis, with -redis-startup-initial-interval")
	fs.DurationVar(&c.maxElapsed, "redis-startup-max-elapsed", 0, "exit with an error if Redis has not answered once this long after start, so the orchestrator restarts the sidecar; 0 waits for ever, serving failure modes")
}

// check reports the bad values.
func (c *startupConfig) check(p *problems) {
	if c.initial < 0 {
		p.add("-redis-startup-initial-interval %v: want 0 (off) or more", c.initial)
	}
	if c.max <= 0 {
		p.add("-redis-startup-max-interval %v: want more than 0", c.max)
	}
	if c.maxElapsed < 0 {
		p.add("-redis-startup-max-elapsed %v: want 0 (for ever) or more", c.maxElapsed)
	}
}

// enabled reports whether the wait differs from the health loop's own
// pings.
func (c *startupConfig) enabled() bool { return c.initial > 0 || c.maxElapsed > 0 }

// errStoreUnreachable is returned by startupWait.run when the store did
// not answer within maxElapsed.
var errStoreUnreachable = errors.New("redis: not reachable since start")

// startupWait pings the store until its first answer; see startupConfig.
type startupWait struct {
	cfg      startupConfig
	interval time.Duration // -health-interval: the spacing without cfg.initial
	ping     func(context.Context) error
	log      *zap.Logger
	// now and after are the clock, time.Now and time.After but in tests;
	// jitter returns a number in [0, 1), rand.Float64 but in tests.
	now    func() time.Time
	after  func(time.Duration) <-chan time.Time
	jitter func() float64
}

func newStartupWait(cfg startupConfig, interval time.Duration, ping func(context.Context) error, log *zap.Logger) *startupWait {
	return &startupWait{cfg: cfg, interval: interval, ping: ping, log: log, now: time.Now, after: time.After, jitter: rand.Float64}
}

// run pings the store at once, then after each wait until it answers, and
// returns nil then. It returns errStoreUnreachable, wrapped with the last
// ping's error, once cfg.maxElapsed has passed since run began without an
// answer, and ctx.Err() when ctx ends first. Each ping is bounded as the
// health loop bounds its own.
func (w *startupWait) run(ctx context.Context) error {
	start := w.now()
	for attempt := 0; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, max(w.interval/2, 100*time.Millisecond))
		err := w.ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		elapsed := w.now().Sub(start)
		if err == nil {
			if attempt > 0 {
				w.log.Info("redis answered", zap.Int("attempts", attempt+1), zap.Duration("elapsed", elapsed))
			}
			return nil
		}
		if w.cfg.maxElapsed > 0 && elapsed >= w.cfg.maxElapsed {
			return fmt.Errorf("%w: %v after %v: %w", errStoreUnreachable, w.cfg.maxElapsed, elapsed.Round(time.Millisecond), err)
		}
		d := w.wait(attempt)
		if w.cfg.maxElapsed > 0 {
			// Ping once more when the time is up rather than after it.
			d = min(d, w.cfg.maxElapsed-elapsed)
		}
		w.log.Warn("redis not reachable at start: failure modes answer; retrying",
			zap.Duration("retry_in", d), zap.Duration("elapsed", elapsed), zap.Error(err))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.after(d):
		}
	}
}

// wait is the space after the failed ping number attempt (from 0): with
// cfg.initial, initial·2^attempt capped at cfg.max, then jittered
// uniformly down to no less than initial (as the reference's backoff,
// which also waits max each time when max is below initial); else the
// health interval.
func (w *startupWait) wait(attempt int) time.Duration {
	if w.cfg.initial <= 0 {
		return w.interval
	}
	if w.cfg.max <= w.cfg.initial {
		return w.cfg.max
	}
	d := w.cfg.initial
	for range attempt {
		if d >= w.cfg.max/2 {
			d = w.cfg.max
			break
		}
		d *= 2
	}
	d = min(d, w.cfg.max)
	return w.cfg.initial + time.Duration(w.jitter()*float64(d-w.cfg.initial))
}
