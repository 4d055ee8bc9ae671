package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoyrls"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window/redisstore"
)

// redisConfig is the Redis topology, credentials, TLS and circuit breaker
// flags. -redis-url and -redis-timeout live in config itself.
type redisConfig struct {
	mode            string // single, sentinel or cluster
	addrs           string // comma-separated host:port
	masterName      string
	username        string
	password        string
	db              int
	tls             bool
	tlsCA           string
	tlsInsecure     bool
	poolSize        int
	breakerFailures int
	breakerOpenFor  time.Duration
	breakerFailFor  time.Duration
	batchWorkers    int
	batchLinger     time.Duration
}

// addFlags registers the Redis flags on fs; parseFlags gives each its RLS_
// environment variable.
func (c *redisConfig) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.mode, "redis-mode", "single", "Redis topology: single, sentinel or cluster")
	fs.StringVar(&c.addrs, "redis-addrs", "", "comma-separated host:port: the server (single), the sentinels (sentinel) or seed nodes (cluster); instead of -redis-url")
	fs.StringVar(&c.masterName, "redis-master-name", "", "name of the master the sentinels monitor (required with -redis-mode sentinel)")
	fs.StringVar(&c.username, "redis-username", "", "Redis ACL user name")
	fs.StringVar(&c.password, "redis-password", "", "Redis password; prefer RLS_REDIS_PASSWORD, since flags show in the process list")
	fs.IntVar(&c.db, "redis-db", 0, "Redis database number (single and sentinel; a cluster has only 0)")
	fs.BoolVar(&c.tls, "redis-tls", false, "connect to Redis with TLS (implied by a rediss:// -redis-url)")
	fs.StringVar(&c.tlsCA, "redis-tls-ca", "", "PEM file of the CA certificates that sign the Redis servers' certificates; default the system pool")
	fs.BoolVar(&c.tlsInsecure, "redis-tls-insecure-skip-verify", false, "accept any Redis server certificate (testing only)")
	fs.IntVar(&c.poolSize, "redis-pool-size", 0, "connections per Redis node; 0 is go-redis's default, 10 per CPU")
	fs.IntVar(&c.breakerFailures, "redis-breaker-failures", 5, "consecutive failed Redis calls that open the circuit breaker; 0 disables it")
	fs.DurationVar(&c.breakerFailFor, "redis-breaker-fail-for", 250*time.Millisecond, "how long failures must go on before they open the circuit breaker, so one stall that fails every call in flight does not")
	fs.DurationVar(&c.breakerOpenFor, "redis-breaker-open-for", time.Second, "how long the open circuit fails calls at once before it lets one probe through")
	fs.IntVar(&c.batchWorkers, "redis-batch-workers", 1, "batched script calls in flight; each carries every request waiting when it is sent, so while one is out the next batch gathers (one round trip for many decisions); 0 sends each request on its own; not used on a cluster")
	fs.DurationVar(&c.batchLinger, "redis-batch-linger", 0, "when requests are already waiting as a batch starts and the previous batch carried more than one, how long the batch waits for more before it is sent (at most half the time to its earliest deadline, so at most half of -redis-timeout): fewer, larger script calls cost Redis less CPU per decision, each request waits up to this much longer; 0 sends at once")
}

// usesRedis reports whether the counters live in Redis: some -redis-* flag
// was given a value, on the command line or by its RLS_ variable, even one
// equal to its default, such as -redis-timeout 15ms. An address is then
// required (so that a Redis flag without one is an error, not a silent
// in-memory store). An empty value selects nothing: -redis-url "" asks for
// the in-memory store.
func (c *config) usesRedis() bool { return len(c.redisGiven) > 0 }

// redisOptions validates the Redis flags together and returns the options of
// the one client behind the store, for redis.NewUniversalClient: a plain
// client for single, a Sentinel failover client for sentinel (MasterName set)
// and a cluster client for cluster (IsClusterMode). Whatever the flags, the
// counting path gets no retries (a retried script can count twice), and
// ContextTimeoutEnabled, so the deadline the store puts on each call
// (-redis-timeout, see redisstore.Options) bounds it.
func redisOptions(c *config) (*redis.UniversalOptions, error) {
	r := &c.redis
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	o := &redis.UniversalOptions{
		Username: r.username,
		Password: r.password,
		DB:       r.db,
		PoolSize: r.poolSize,
	}
	var addrs []string
	for a := range strings.SplitSeq(r.addrs, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			fail("-redis-addrs: %q: %v", a, err)
		}
		addrs = append(addrs, a)
	}
	urlTLS := false
	switch {
	case c.redisURL != "" && len(addrs) > 0:
		fail("-redis-url and -redis-addrs: set one, not both")
	case c.redisURL != "":
		if r.mode != "single" {
			fail("-redis-url is for -redis-mode single; use -redis-addrs with -redis-mode %s", r.mode)
		}
		u, err := redis.ParseURL(c.redisURL)
		if err != nil {
			fail("-redis-url: %w", err)
			break
		}
		if (u.Username != "" || u.Password != "") && (r.username != "" || r.password != "") {
			fail("-redis-url carries credentials: do not also set -redis-username or -redis-password")
		}
		if u.DB != 0 && r.db != 0 {
			fail("-redis-url names database %d: do not also set -redis-db", u.DB)
		}
		addrs = []string{u.Addr}
		if o.Username == "" && o.Password == "" {
			o.Username, o.Password = u.Username, u.Password
		}
		if o.DB == 0 {
			o.DB = u.DB
		}
		if o.PoolSize == 0 {
			o.PoolSize = u.PoolSize // from ?pool_size=
		}
		if u.Network == "unix" {
			o.Dialer = func(ctx context.Context, _, addr string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", addr)
			}
		}
		if u.TLSConfig != nil {
			urlTLS = true
			o.TLSConfig = u.TLSConfig
		}
	}
	o.Addrs = addrs

	switch r.mode {
	case "single":
		if len(addrs) > 1 {
			fail("-redis-mode single takes one address, got %d; for several use -redis-mode cluster or sentinel", len(addrs))
		}
		if r.masterName != "" {
			fail("-redis-master-name is for -redis-mode sentinel")
		}
	case "sentinel":
		if len(addrs) == 0 {
			fail("-redis-mode sentinel needs the sentinels' addresses in -redis-addrs")
		}
		if r.masterName == "" {
			fail("-redis-mode sentinel needs -redis-master-name")
		}
		o.MasterName = r.masterName
	case "cluster":
		if len(addrs) == 0 {
			fail("-redis-mode cluster needs seed node addresses in -redis-addrs")
		}
		if r.masterName != "" {
			fail("-redis-master-name is for -redis-mode sentinel")
		}
		if r.db != 0 {
			fail("-redis-db %d: a Redis Cluster has only database 0", r.db)
		}
		o.IsClusterMode = true
	default:
		fail("-redis-mode %q: want single, sentinel or cluster", r.mode)
	}
	if len(addrs) == 0 && r.mode == "single" {
		fail("set -redis-url or -redis-addrs (Redis flags given: %s)", strings.Join(c.redisGiven, " "))
	}
	if r.db < 0 {
		fail("-redis-db %d: want 0 or more", r.db)
	}
	if r.poolSize < 0 {
		fail("-redis-pool-size %d: want 0 (default) or more", r.poolSize)
	}
	if r.breakerFailures < 0 {
		fail("-redis-breaker-failures %d: want 0 (off) or more", r.breakerFailures)
	}
	if r.breakerFailures > 0 && r.breakerOpenFor <= 0 {
		fail("-redis-breaker-open-for %v: want more than 0", r.breakerOpenFor)
	}
	if c.redisTimeout <= 0 {
		fail("-redis-timeout %v: want more than 0", c.redisTimeout)
	}
	// A batch never waits more than half the time to its earliest
	// deadline (redisstore.BatchOptions.Linger), so more would not be waited.
	if r.batchLinger < 0 || r.batchLinger > c.redisTimeout/2 {
		fail("-redis-batch-linger %v: want 0 (off) to half of -redis-timeout (%v)", r.batchLinger, c.redisTimeout/2)
	}
	if r.batchLinger > 0 && (r.batchWorkers == 0 || r.mode == "cluster") {
		fail("-redis-batch-linger needs batching: not with -redis-batch-workers 0 or -redis-mode cluster")
	}

	if (r.tlsCA != "" || r.tlsInsecure) && !r.tls && !urlTLS {
		fail("-redis-tls-ca and -redis-tls-insecure-skip-verify need -redis-tls (or a rediss:// URL)")
	}
	if r.tls || urlTLS {
		if o.TLSConfig == nil {
			// ServerName stays empty: crypto/tls takes it from each node's
			// address, which a cluster needs.
			o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		o.TLSConfig.InsecureSkipVerify = r.tlsInsecure
		if r.tlsCA != "" {
			pem, err := os.ReadFile(r.tlsCA)
			if err != nil {
				fail("-redis-tls-ca: %w", err)
			} else {
				pool := x509.NewCertPool()
				if !pool.AppendCertsFromPEM(pem) {
					fail("-redis-tls-ca %s: no PEM certificate in it", r.tlsCA)
				}
				o.TLSConfig.RootCAs = pool
			}
		}
	}

	o.MaxRetries = -1
	o.ContextTimeoutEnabled = true
	// RESP2: the counting path needs nothing of RESP3, and with RESP3
	// go-redis checks every connection for push notifications before each
	// command (about 2% of the sidecar's CPU under load). RESP2 also
	// spares the HELLO that Redis before 6.0 refuses.
	o.Protocol = 2
	// One dial attempt: a node that refuses should fail its calls at once,
	// not after go-redis's five attempts with backoff.
	o.DialerRetries = 1
	o.DialTimeout = max(c.redisTimeout*10, time.Second)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return o, nil
}

// newRedisClient returns the client for the counting path, built from the
// validated Redis flags; see redisOptions.
func newRedisClient(c *config) (redis.UniversalClient, error) {
	o, err := redisOptions(c)
	if err != nil {
		return nil, err
	}
	return redis.NewUniversalClient(o), nil
}

// redisStore is the Redis store as served, layered from the outside in:
// the over-limit cache (a full counter is denied without Redis until its
// window ends), the circuit breaker (a dead Redis costs microseconds), the
// Lua store, which coalesces concurrent requests into one script call. Each
// layer can be turned off by its flag. It is not a store itself: the
// server is handed Store, so a decision pays no extra call through it.
type redisStore struct {
	Store   envoyrls.Store // the outermost layer
	redis   *redisstore.Store
	batched bool            // Takes are coalesced: -redis-batch-workers > 0, not a cluster
	breaker *window.Breaker // nil without -redis-breaker-failures
}

// RoundTrips returns the round trips (script calls) sent to Redis.
func (s *redisStore) RoundTrips() uint64 { return s.redis.RoundTrips() }

// BreakerOpen reports whether the circuit breaker is refusing calls.
func (s *redisStore) BreakerOpen() bool {
	return s.breaker != nil && s.breaker.State() != window.BreakerClosed
}

// Close stops the batch workers; the client is closed by its owner.
func (s *redisStore) Close() error { return s.redis.Close() }

// batchOptions are the batched store's options from the flags.
func (r *redisConfig) batchOptions() redisstore.BatchOptions {
	return redisstore.BatchOptions{Workers: r.batchWorkers, Linger: r.batchLinger}
}

// newRedisStore returns the store over client; see redisStore. The
// breaker's changes are logged.
func newRedisStore(c *config, client redis.UniversalClient, log *zap.Logger) *redisStore {
	rs := &redisStore{}
	ro := redisstore.Options{Timeout: c.redisTimeout}
	if c.redis.batchWorkers > 0 {
		var err error
		rs.redis, err = redisstore.NewBatched(client, ro, c.redis.batchOptions())
		// It fails only for a cluster client (redisstore.ErrClusterBatch),
		// whose requests of different slots cannot share a script: a
		// cluster is served unbatched, as -redis-batch-workers documents.
		rs.batched = err == nil
		if err != nil {
			log.Info("redis cluster: requests are sent unbatched", zap.Error(err))
		}
	}
	if !rs.batched {
		rs.redis = redisstore.New(client, ro)
	}
	rs.Store = rs.redis
	if c.redis.breakerFailures > 0 {
		rs.breaker = window.NewBreaker(rs.redis, window.BreakerOptions{
			FailureThreshold: c.redis.breakerFailures,
			FailFor:          c.redis.breakerFailFor,
			OpenFor:          c.redis.breakerOpenFor,
			OnStateChange: func(open bool) {
				if open {
					log.Warn("redis circuit breaker open: failing store calls at once",
						zap.Int("consecutive_failures", c.redis.breakerFailures), zap.Duration("open_for", c.redis.breakerOpenFor))
				} else {
					log.Info("redis circuit breaker closed")
				}
			},
		})
		rs.Store = rs.breaker
	}
	if c.overLimitCache {
		rs.Store = window.NewOverLimitCache(rs.Store)
	}
	return rs
}

// redisLogger sends go-redis's own log lines (pool dial failures, Sentinel
// switches) through zap, so -log-format json holds for every stderr line.
// go-redis has one logger per process; run sets it once and points it at
// the newest run's logger.
type redisLogger struct{ log atomic.Pointer[zap.Logger] }

var goRedisLogger = func() *redisLogger {
	l := &redisLogger{}
	l.log.Store(zap.NewNop())
	redis.SetLogger(l)
	return l
}()

func (l *redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.Load().Warn("redis: "+strings.TrimSpace(fmt.Sprintf(format, v...)), zap.String("source", "go-redis"))
}
