package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window/redisstore"
)

// redisOptions validates the Redis flags together and returns the options of
// the one client behind the store, for redis.NewUniversalClient: a plain
// client for single, a Sentinel failover client for sentinel (MasterName set)
// and a cluster client for cluster (IsClusterMode). Whatever the flags, the
// counting path gets no retries (a retried script can count twice), and
// ContextTimeoutEnabled, so the deadline the store puts on each call
// (from the request's, -redis-timeout and -redis-timeout-cap; see
// redisstore.Options) bounds it. Every problem is
// reported at once.
func redisOptions(c *options) (*redis.UniversalOptions, error) {
	r := &c.redis
	var p problems
	o := &redis.UniversalOptions{
		Username:         r.username,
		Password:         r.password,
		SentinelUsername: r.sentinelUser,
		SentinelPassword: r.sentinelPass,
		DB:               r.db,
		PoolSize:         r.poolSize,
	}
	o.Addrs = parseRedisAddrs(r.addrs, &p)
	urlTLS := false
	switch {
	case c.redisURL != "" && len(o.Addrs) > 0:
		p.add("-redis-url and -redis-addrs: set one, not both")
	case c.redisURL != "":
		urlTLS = applyRedisURL(c, o, &p)
	}
	checkRedisMode(c, o, &p)
	checkRedisLimits(c, &p)
	applyRedisTLS(r, o, urlTLS, &p)
	setRedisConnection(o, c.redisTimeout, c.redisTimeoutCap)
	if err := p.err(); err != nil {
		return nil, err
	}
	return o, nil
}

// problems collects every problem with the flags, to report them at once.
type problems []error

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Errorf(format, args...)) }

func (p problems) err() error { return errors.Join(p...) }

// parseRedisAddrs splits -redis-addrs into host:port addresses, skipping
// empty ones.
func parseRedisAddrs(list string, p *problems) []string {
	var addrs []string
	for a := range strings.SplitSeq(list, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			p.add("-redis-addrs: %q: %v", a, err)
		}
		addrs = append(addrs, a)
	}
	return addrs
}

// applyRedisURL sets o's address, and its credentials, database, pool size,
// unix dialer and TLS where -redis-url names them and no flag does. It
// reports whether the URL asks for TLS (rediss://).
func applyRedisURL(c *options, o *redis.UniversalOptions, p *problems) (urlTLS bool) {
	r := &c.redis
	if r.mode != "single" {
		p.add("-redis-url is for -redis-mode single; use -redis-addrs with -redis-mode %s", r.mode)
	}
	u, err := redis.ParseURL(c.redisURL)
	if err != nil {
		p.add("-redis-url: %w", err)
		return false
	}
	if (u.Username != "" || u.Password != "") && (r.username != "" || r.password != "") {
		p.add("-redis-url carries credentials: do not also set -redis-username or -redis-password")
	}
	if u.DB != 0 && r.db != 0 {
		p.add("-redis-url names database %d: do not also set -redis-db", u.DB)
	}
	o.Addrs = []string{u.Addr}
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
		o.TLSConfig = u.TLSConfig
		return true
	}
	return false
}

// checkRedisMode checks o's addresses and the flags against -redis-mode and
// sets the Sentinel master or cluster mode.
func checkRedisMode(c *options, o *redis.UniversalOptions, p *problems) {
	r := &c.redis
	if r.mode != "sentinel" && (r.sentinelUser != "" || r.sentinelPass != "") {
		p.add("-redis-sentinel-username and -redis-sentinel-password are for -redis-mode sentinel")
	}
	switch r.mode {
	case "single":
		if len(o.Addrs) > 1 {
			p.add("-redis-mode single takes one address, got %d; for several use -redis-mode cluster or sentinel", len(o.Addrs))
		}
		if r.masterName != "" {
			p.add("-redis-master-name is for -redis-mode sentinel")
		}
		if len(o.Addrs) == 0 {
			p.add("set -redis-url or -redis-addrs (Redis flags given: %s)", strings.Join(c.redisGiven, " "))
		}
	case "sentinel":
		if len(o.Addrs) == 0 {
			p.add("-redis-mode sentinel needs the sentinels' addresses in -redis-addrs")
		}
		if r.masterName == "" {
			p.add("-redis-mode sentinel needs -redis-master-name")
		}
		o.MasterName = r.masterName
	case "cluster":
		if len(o.Addrs) == 0 {
			p.add("-redis-mode cluster needs seed node addresses in -redis-addrs")
		}
		if r.masterName != "" {
			p.add("-redis-master-name is for -redis-mode sentinel")
		}
		if r.db != 0 {
			p.add("-redis-db %d: a Redis Cluster has only database 0", r.db)
		}
		o.IsClusterMode = true
	default:
		p.add("-redis-mode %q: want single, sentinel or cluster", r.mode)
	}
}

// checkRedisLimits checks the numeric flags: database, pool, breaker,
// timeout and batching.
func checkRedisLimits(c *options, p *problems) {
	r := &c.redis
	if r.db < 0 {
		p.add("-redis-db %d: want 0 or more", r.db)
	}
	if r.poolSize < 0 {
		p.add("-redis-pool-size %d: want 0 (default) or more", r.poolSize)
	}
	if r.breakerFailures < 0 {
		p.add("-redis-breaker-failures %d: want 0 (off) or more", r.breakerFailures)
	}
	if r.breakerBudget < 0 {
		p.add("-redis-breaker-min-budget %v: want 0 (every timeout counts) or more", r.breakerBudget)
	}
	if r.waitReplicas < 0 {
		p.add("-redis-sentinel-wait-replicas %d: want 0 (off) or more", r.waitReplicas)
	}
	if r.breakerFailures > 0 && r.breakerOpenFor <= 0 {
		p.add("-redis-breaker-open-for %v: want more than 0", r.breakerOpenFor)
	}
	if c.redisTimeout <= 0 {
		p.add("-redis-timeout %v: want more than 0", c.redisTimeout)
	}
	if c.redisTimeoutCap < 0 {
		p.add("-redis-timeout-cap %v: want 0 (none) or more", c.redisTimeoutCap)
	}
	// A batch never waits more than half the time to its earliest
	// deadline (redisstore.BatchOptions.Linger), so more would not be waited.
	if r.batchLinger < 0 || r.batchLinger > c.redisTimeout/2 {
		p.add("-redis-batch-linger %v: want 0 (off) to half of -redis-timeout (%v)", r.batchLinger, c.redisTimeout/2)
	}
	if r.batchLinger > 0 && r.batchWorkers == 0 {
		p.add("-redis-batch-linger needs batching: not with -redis-batch-workers 0")
	}
	r.startup.check(p)
	if r.batchSpacing <= 0 {
		p.add("-redis-batch-spacing %v: want more than 0", r.batchSpacing)
	}
}

// applyRedisTLS sets o's TLS configuration from -redis-tls and its CA,
// client certificate and verification flags, on top of a rediss:// URL's
// (urlTLS).
func applyRedisTLS(r *redisConfig, o *redis.UniversalOptions, urlTLS bool, p *problems) {
	if (r.tlsCA != "" || r.tlsInsecure || r.tlsSkipHostname || r.tlsCert != "" || r.tlsKey != "") && !r.tls && !urlTLS {
		p.add("-redis-tls-ca, -redis-tls-cert, -redis-tls-key, -redis-tls-insecure-skip-verify and -redis-tls-skip-hostname-verification need -redis-tls (or a rediss:// URL)")
	}
	if (r.tlsCert == "") != (r.tlsKey == "") {
		p.add("-redis-tls-cert and -redis-tls-key go together")
	}
	if !r.tls && !urlTLS {
		return
	}
	if o.TLSConfig == nil {
		// ServerName stays empty: crypto/tls takes it from each node's
		// address, which a cluster needs.
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	o.TLSConfig.InsecureSkipVerify = r.tlsInsecure
	if r.tlsCert != "" && r.tlsKey != "" {
		cert, err := tls.LoadX509KeyPair(r.tlsCert, r.tlsKey)
		if err != nil {
			p.add("-redis-tls-cert, -redis-tls-key: %w", err)
		} else {
			o.TLSConfig.Certificates = []tls.Certificate{cert}
		}
	}
	if r.tlsCA != "" {
		pem, err := os.ReadFile(r.tlsCA)
		if err != nil {
			p.add("-redis-tls-ca: %w", err)
			return
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			p.add("-redis-tls-ca %s: no PEM certificate in it", r.tlsCA)
		}
		o.TLSConfig.RootCAs = pool
	}
	if r.tlsSkipHostname && !r.tlsInsecure {
		skipHostnameVerification(o.TLSConfig)
	}
}

// skipHostnameVerification makes c check the server's certificate chain
// against its roots but not the name in it, as the reference's
// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION does: crypto/tls's own check, which
// would also verify the name, is turned off and done here without it.
func skipHostnameVerification(c *tls.Config) {
	c.InsecureSkipVerify = true
	roots := c.RootCAs
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("redis tls: no server certificate")
		}
		opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
		for _, ic := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(ic)
		}
		_, err := cs.PeerCertificates[0].Verify(opts)
		return err
	}
}

// setRedisConnection sets what holds whatever the flags: no retries on the
// counting path, context deadlines, RESP2, one dial attempt, and a dial
// timeout of ten times -redis-timeout, at least a second, and not more than
// -redis-timeout-cap when that is over a second (the reference's
// REDIS_TIMEOUT bounds its dials so).
func setRedisConnection(o *redis.UniversalOptions, timeout, maxTimeout time.Duration) {
	o.MaxRetries = -1
	o.ContextTimeoutEnabled = true
	// RESP2: the counting path needs nothing of RESP3, and with RESP3
	// go-redis checks every connection for push notifications before each
	// command. RESP2 also spares the HELLO that Redis before 6.0 refuses.
	o.Protocol = 2
	// One dial attempt: a node that refuses should fail its calls at once,
	// not after go-redis's five attempts with backoff.
	o.DialerRetries = 1
	o.DialTimeout = max(timeout*10, time.Second)
	if maxTimeout > 0 {
		o.DialTimeout = min(o.DialTimeout, max(maxTimeout, time.Second))
	}
}

// newRedisClient returns the client for the counting path, built from the
// validated Redis flags; see redisOptions.
func newRedisClient(c *options) (redis.UniversalClient, error) {
	o, err := redisOptions(c)
	if err != nil {
		return nil, err
	}
	return redis.NewUniversalClient(o), nil
}

// poolStatsOf is go-redis's pool statistics as package metrics exports
// them; nil for nil.
func poolStatsOf(s *redis.PoolStats) *metrics.PoolStats {
	if s == nil {
		return nil
	}
	return &metrics.PoolStats{Hits: s.Hits, Misses: s.Misses, Timeouts: s.Timeouts,
		StaleConns: s.StaleConns, TotalConns: s.TotalConns, IdleConns: s.IdleConns}
}

// redisStore is the Redis store as served, layered from the outside in:
// the over-limit cache (a full counter is denied without Redis until its
// window ends), the circuit breaker (a dead Redis costs microseconds), the
// Lua store, which coalesces concurrent requests into one script call. Each
// layer can be turned off by its flag. It is not a store itself: the
// server is handed Store, so a decision pays no extra call through it.
type redisStore struct {
	Store   window.Store // the outermost layer
	redis   *redisstore.Store
	batched bool            // Takes are coalesced: -redis-batch-workers > 0
	breaker *window.Breaker // nil without -redis-breaker-failures
	// promotable asks the sentinels whether a replica could take writes
	// the master's replicas did not acknowledge; nil unless behind Sentinel
	// with -redis-sentinel-wait-replicas.
	promotable *redisstore.Promotable
}

// newPromotable returns a redisstore.Promotable through the sentinels of
// the flags (validated), with their credentials, TLS and timeouts, as the
// Sentinel failover client reaches them.
func newPromotable(c *options) *redisstore.Promotable {
	o, _ := redisOptions(c) // validated before the client was made
	opts := make([]*redis.Options, 0, len(o.Addrs))
	for _, a := range o.Addrs {
		opts = append(opts, &redis.Options{Addr: a, Username: o.SentinelUsername, Password: o.SentinelPassword,
			TLSConfig: o.TLSConfig, Dialer: o.Dialer, DialTimeout: o.DialTimeout, MaxRetries: -1,
			ContextTimeoutEnabled: true, PoolSize: 2})
	}
	return redisstore.NewPromotable(opts, o.MasterName, 0)
}

// RoundTrips returns the round trips (script calls) sent to Redis.
func (s *redisStore) RoundTrips() uint64 { return s.redis.RoundTrips() }

// BreakerOpen reports whether the circuit breaker is refusing calls.
func (s *redisStore) BreakerOpen() bool {
	return s.breaker != nil && s.breaker.State() != window.BreakerClosed
}

// Close stops the batch workers and closes the sentinel clients; the
// counting client is closed by its owner.
func (s *redisStore) Close() error {
	err := s.redis.Close()
	if s.promotable != nil {
		err = errors.Join(err, s.promotable.Close())
	}
	return err
}

// batchOptions are the batched store's options from the flags.
func (r *redisConfig) batchOptions() redisstore.BatchOptions {
	return redisstore.BatchOptions{Workers: r.batchWorkers, Spacing: r.batchSpacing, Linger: r.batchLinger}
}

// newRedisStore returns the store over client; see redisStore. The
// breaker's changes are logged; tracer, when not nil, makes a span of each
// Redis call.
func newRedisStore(c *options, client redis.UniversalClient, log *zap.Logger, tracer trace.Tracer) *redisStore {
	rs := &redisStore{}
	ro := redisstore.Options{Timeout: c.redisTimeout, MaxTimeout: c.redisTimeoutCap, Tracer: tracer}
	if c.redis.mode == "sentinel" && c.redis.waitReplicas > 0 {
		ro.WaitReplicas = c.redis.waitReplicas
		rs.promotable = newPromotable(c)
		ro.Promotable = rs.promotable
	}
	if c.redis.batchWorkers > 0 {
		// Batched on every topology; on a cluster each batch is one script
		// call per node, every node's at once (per hash slot, pipelined per
		// node, on servers before Redis 7.0). It fails only for
		// negative batch options, which redisOptions refused.
		var err error
		rs.redis, err = redisstore.NewBatched(client, ro, c.redis.batchOptions())
		rs.batched = err == nil
		if err != nil {
			log.Warn("redis: requests are sent unbatched", zap.Error(err))
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
			MinBudget:        c.redis.breakerBudget,
			Budget:           rs.redis.Budget,
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
