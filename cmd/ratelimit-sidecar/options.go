package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoyrls"
)

// options are the process settings: flags, each with an RLS_ environment
// variable, resolved once at start by parseOptions.
type options struct {
	configPath      string
	grpcAddr        string
	httpAddr        string
	redisURL        string
	redisTimeout    time.Duration // a call without a deadline
	redisTimeoutCap time.Duration // 0: calls follow their deadlines
	redis           redisConfig   // topology, credentials, TLS, breaker: see redis.go
	tracing         tracingConfig
	keyPrefix       string
	refKeys         refKeysConfig // -reference-keys: see refkeys.go
	logLevel        string
	logFormat       string
	shutdownTimeout time.Duration
	healthInterval  time.Duration
	clockSync       time.Duration // 0: windows follow the local clock
	overLimitCache  bool
	debugAddr       string
	metricsAddr     string // "": metrics only on httpAddr
	metricsPath     string
	responseTimeMs  bool          // ratelimit_service_response_time_seconds in milliseconds
	grpcMaxAge      time.Duration // 0: connections live for ever
	grpcMaxAgeGrace time.Duration // 0: for ever
	grpcTLS         grpcTLSConfig // see tls.go
	nearLimitRatio  float64
	shadowMode      bool
	quotaMode       bool
	dynamicMetadata bool
	mergeDomains    bool
	limits          envoyrls.InputLimits
	maxConcurrent   int       // 0: ShouldRateLimit calls are not capped
	xds             xdsConfig // -config-type and the xDS client: see xds.go
	rlqs            rlqsConfig
	// refNotes are what the reference's environment asked that this
	// project does differently, one log line each at start; see refenv.go.
	refNotes []refNote
	// ignoredArgs are the arguments dropped because the binary was
	// started under the reference's name (see referenceName); logged once.
	ignoredArgs []string
	// redisGiven names the -redis-* flags given a value other than "",
	// on the command line or by their RLS_ variable; see usesRedis.
	redisGiven []string
}

// parseOptions resolves the settings of the command started as name: each
// flag from args (under the reference's name, only those it defines: see
// referenceName), else from its
// RLS_ variable (see config.EnvName), else from envoyproxy/ratelimit's
// variables (see refenv.go), else its default. Every bad value is reported
// at once.
func parseOptions(name string, args []string, getenv func(string) string, stderr io.Writer) (*options, error) {
	c := &options{}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.addFlags(fs)
	if startedAsReference(name) {
		args, c.ignoredArgs = splitForeign(fs, args)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{} // on the command line or in the environment
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return // the flag wins over the environment
		}
		if v := getenv(config.EnvName(f.Name)); v != "" {
			set[f.Name] = true
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", config.EnvName(f.Name), v, err))
			}
		}
	})
	ref, err := referenceEnv(getenv)
	if err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, ref.apply(fs, set)...)
	c.refNotes = ref.notes
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] && strings.HasPrefix(f.Name, "redis-") && f.Value.String() != "" {
			c.redisGiven = append(c.redisGiven, "-"+f.Name)
		}
	})
	if c.clockSync < 0 {
		errs = append(errs, fmt.Errorf("-clock-sync-interval %v: want >= 0", c.clockSync))
	}
	if !strings.HasPrefix(c.metricsPath, "/") {
		errs = append(errs, fmt.Errorf("-metrics-path %q: want a path starting with /", c.metricsPath))
	}
	if c.metricsAddr != "" && c.metricsAddr == c.httpAddr && !strings.HasSuffix(c.httpAddr, ":0") {
		if c.metricsPath != config.DefaultMetricsPath {
			errs = append(errs, fmt.Errorf("-metrics-addr is -http-addr %s, which serves metrics at %s, not -metrics-path %s", c.httpAddr, config.DefaultMetricsPath, c.metricsPath))
		}
		c.metricsAddr = "" // already served there
	}
	if c.maxConcurrent < 0 {
		errs = append(errs, fmt.Errorf("-max-concurrent-requests %d: want 0 (no cap) or more", c.maxConcurrent))
	}
	if c.nearLimitRatio <= 0 || c.nearLimitRatio > 1 {
		errs = append(errs, fmt.Errorf("-near-limit-ratio %v: want more than 0, at most 1", c.nearLimitRatio))
	}
	if err := c.refKeys.check(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.grpcTLS.check()...)
	errs = append(errs, c.rlqs.check()...)
	if err := c.tracing.check(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.xds.check(c.configPath)...)
	if c.xds.configType == configXDS && c.configPath != "" {
		c.refNotes = append(c.refNotes, refNote{name: "-config", text: "not used: -config-type grpc-xds-sotw takes the rules from xDS (" + c.configPath + ")"})
	}
	return c, errors.Join(errs...)
}

// addFlags registers the flags on fs with their defaults; parseOptions
// gives each its RLS_ environment variable.
func (c *options) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.configPath, "config", "", "rules file, or directory of *.yaml/*.yml rule files (required with -config-type file)")
	c.xds.addFlags(fs)
	fs.StringVar(&c.grpcAddr, "grpc-addr", config.DefaultGRPCAddr, "gRPC listen address for ratelimit.v3 and grpc.health.v1: host:port or unix:///path")
	fs.StringVar(&c.httpAddr, "http-addr", config.DefaultHTTPAddr, "HTTP listen address for /healthcheck, /json, /rlconfig, /healthz, /readyz, /rules and /metrics; empty disables")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "also serve Prometheus metrics on this address, at -metrics-path; empty serves them only at /metrics on -http-addr")
	fs.StringVar(&c.metricsPath, "metrics-path", config.DefaultMetricsPath, "path of the metrics on -metrics-addr")
	fs.BoolVar(&c.responseTimeMs, "metrics-response-time-ms", false, "export envoyproxy/ratelimit's ratelimit_service_response_time_seconds in milliseconds, its unit before its #1104, instead of seconds")
	fs.DurationVar(&c.grpcMaxAge, "grpc-max-connection-age", 0, "close gRPC connections after about this long (GOAWAY), so clients rebalance; 0 never")
	fs.DurationVar(&c.grpcMaxAgeGrace, "grpc-max-connection-age-grace", 0, "after -grpc-max-connection-age, how long calls in flight may finish before the connection is closed; 0 for ever")
	c.grpcTLS.addFlags(fs)
	c.rlqs.addFlags(fs)
	fs.StringVar(&c.redisURL, "redis-url", "", "redis://[user:password@]host:port/db or rediss://...; empty uses the in-memory store (one replica only)")
	fs.DurationVar(&c.redisTimeout, "redis-timeout", config.DefaultRedisTimeout, "bound on a Redis counting call for a request that carries no deadline; a request with one (Envoy sends its filter timeout) gets the time left to it less a margin for answering (a tenth, at least 5ms) instead, longer or shorter, so its failure mode still answers in time; health pings and the in-memory store are not bound by it")
	fs.DurationVar(&c.redisTimeoutCap, "redis-timeout-cap", 0, "when above 0, no Redis counting call waits longer, whatever the request's deadline: for failure modes fast rather than decisions from a slow Redis; 0 follows each request's deadline")
	c.redis.addFlags(fs)
	c.tracing.addFlags(fs)
	fs.StringVar(&c.keyPrefix, "key-prefix", config.DefaultKeyPrefix, "first part of every counter key")
	c.refKeys.addFlags(fs)
	fs.StringVar(&c.logLevel, "log-level", config.DefaultLogLevel, "debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", config.DefaultLogFormat, "json or console")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", config.DefaultShutdownTimeout, "how long in-flight calls may take to finish after SIGTERM")
	fs.DurationVar(&c.healthInterval, "health-interval", config.DefaultHealthInterval, "how often the store is pinged for readiness")
	fs.StringVar(&c.debugAddr, "debug-addr", "", "serve Go's net/http/pprof profiles and /rlconfig on this address (e.g. 127.0.0.1:6070); empty disables; never expose it")
	fs.Float64Var(&c.nearLimitRatio, "near-limit-ratio", config.DefaultNearLimitRatio, "an allowed decision counts as near_limit in metrics when its hits exceed the limit times this, rounded down")
	fs.BoolVar(&c.shadowMode, "shadow-mode", false, "every limit in shadow mode: counted and reported in metrics, never OVER_LIMIT")
	fs.BoolVar(&c.quotaMode, "quota-mode", false, "every limit in quota mode (see docs/rules.md)")
	fs.BoolVar(&c.dynamicMetadata, "response-dynamic-metadata", false, "put the limits applied and the descriptors' metadata in the response's dynamic_metadata")
	fs.BoolVar(&c.mergeDomains, "merge-domains", false, "merge rules files of the same domain instead of refusing them")
	fs.BoolVar(&c.overLimitCache, "over-limit-cache", config.DefaultOverLimitCache, "with Redis: deny locally, until its window ends, a fixed-window counter known to be full (no Redis traffic for a key under attack)")
	fs.DurationVar(&c.clockSync, "clock-sync-interval", config.DefaultClockSyncInterval, "how often the offset to the Redis server's clock (TIME) is measured, so replicas agree on windows; 0 uses the local clock")
	fs.IntVar(&c.limits.MaxDescriptors, "max-descriptors", config.DefaultMaxDescriptors, "most descriptors in one request")
	fs.IntVar(&c.limits.MaxEntries, "max-entries", config.DefaultMaxEntries, "most entries in one descriptor")
	fs.IntVar(&c.limits.MaxEntryBytes, "max-entry-bytes", config.DefaultMaxEntryBytes, "longest descriptor key, value or domain, in bytes")
	fs.Uint64Var(&c.limits.MaxHits, "max-hits", config.DefaultMaxHits, "largest hits_addend of one descriptor")
	fs.IntVar(&c.maxConcurrent, "max-concurrent-requests", 0, "most ShouldRateLimit calls (gRPC and /json) in progress at once; one more is refused at once with ResourceExhausted, never queued; RLQS streams are not counted; 0 caps nothing")
}

// redisConfig is the Redis topology, credentials, TLS and circuit breaker
// flags. -redis-url, -redis-timeout and -redis-timeout-cap live in options
// itself.
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
	tlsSkipHostname bool
	tlsCert         string
	tlsKey          string
	sentinelUser    string
	sentinelPass    string
	poolSize        int
	waitReplicas    int // with -redis-mode sentinel
	breakerFailures int
	breakerOpenFor  time.Duration
	breakerFailFor  time.Duration
	breakerBudget   time.Duration // -redis-breaker-min-budget
	batchWorkers    int
	batchSpacing    time.Duration
	batchLinger     time.Duration
	startup         startupConfig // the wait for Redis's first answer: see startup.go
}

// addFlags registers the Redis flags on fs; parseOptions gives each its RLS_
// environment variable.
func (c *redisConfig) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.mode, "redis-mode", config.DefaultRedisMode, "Redis topology: single, sentinel or cluster")
	fs.StringVar(&c.addrs, "redis-addrs", "", "comma-separated host:port: the server (single), the sentinels (sentinel) or seed nodes (cluster); instead of -redis-url")
	fs.StringVar(&c.masterName, "redis-master-name", "", "name of the master the sentinels monitor (required with -redis-mode sentinel)")
	fs.StringVar(&c.username, "redis-username", "", "Redis ACL user name")
	fs.StringVar(&c.password, "redis-password", "", "Redis password; prefer RLS_REDIS_PASSWORD, since flags show in the process list")
	fs.IntVar(&c.db, "redis-db", 0, "Redis database number (single and sentinel; a cluster has only 0)")
	fs.BoolVar(&c.tls, "redis-tls", false, "connect to Redis with TLS (implied by a rediss:// -redis-url)")
	fs.StringVar(&c.tlsCA, "redis-tls-ca", "", "PEM file of the CA certificates that sign the Redis servers' certificates; default the system pool")
	fs.BoolVar(&c.tlsInsecure, "redis-tls-insecure-skip-verify", false, "accept any Redis server certificate (testing only)")
	fs.BoolVar(&c.tlsSkipHostname, "redis-tls-skip-hostname-verification", false, "check the Redis server certificate's chain but not its name")
	fs.StringVar(&c.tlsCert, "redis-tls-cert", "", "PEM file of the client certificate to present to Redis (with -redis-tls-key)")
	fs.StringVar(&c.tlsKey, "redis-tls-key", "", "PEM file of the client certificate's key")
	fs.StringVar(&c.sentinelUser, "redis-sentinel-username", "", "ACL user name for the sentinels (not the master)")
	fs.StringVar(&c.sentinelPass, "redis-sentinel-password", "", "password for the sentinels (not the master); prefer RLS_REDIS_SENTINEL_PASSWORD")
	fs.IntVar(&c.poolSize, "redis-pool-size", 0, "connections per Redis node; 0 is go-redis's default, 10 per CPU")
	fs.IntVar(&c.waitReplicas, "redis-sentinel-wait-replicas", config.DefaultRedisSentinelWaitReplicas, "with -redis-mode sentinel, how many replicas must acknowledge a counting call's writes (WAIT, in the same round trip) before its answer counts; a call they do not confirm within its deadline gets the failure mode, so a failover, whose old master drops what it took after the promotion, loses no charge the sidecar admitted; 0 sends no WAIT (faster; a failover then loses the writes the old master took after the promotion)")
	fs.IntVar(&c.breakerFailures, "redis-breaker-failures", config.DefaultRedisBreakerFailures, "consecutive failed Redis calls that open the circuit breaker; 0 disables it")
	fs.DurationVar(&c.breakerFailFor, "redis-breaker-fail-for", config.DefaultRedisBreakerFailFor, "how long failures must go on before they open the circuit breaker, so one stall that fails every call in flight does not")
	fs.DurationVar(&c.breakerBudget, "redis-breaker-min-budget", config.DefaultRedisBreakerMinBudget, "a Redis call that ran out of time counts towards the circuit breaker only if it had at least this long (its request's deadline less the answering margin, or -redis-timeout, capped by -redis-timeout-cap): a shorter budget that runs out, as under a starved CPU, does not open it; refused or lost connections always count; 0 counts every timeout")
	fs.DurationVar(&c.breakerOpenFor, "redis-breaker-open-for", config.DefaultRedisBreakerOpenFor, "how long the open circuit fails calls at once before it lets one probe through")
	fs.IntVar(&c.batchWorkers, "redis-batch-workers", config.DefaultRedisBatchWorkers, "the most batched script calls in flight; each carries every request waiting when it is sent, so while one is out the next batch gathers (one round trip for many decisions), and another leaves beside it once it has been out -redis-batch-spacing: how many are out follows the round trip; 0 sends each request on its own; on a cluster one call per node")
	fs.DurationVar(&c.batchSpacing, "redis-batch-spacing", config.DefaultRedisBatchSpacing, "while a batched call is out, the next batch leaves when it comes back or once it has been out this long, whichever is first: a request waits at most about this long for its batch to leave however far Redis is, and a Redis answering within it keeps one call in flight (the largest batches)")
	c.startup.addFlags(fs)
	fs.DurationVar(&c.batchLinger, "redis-batch-linger", 0, "when requests are already waiting as a batch starts and the previous batch carried more than one, how long the batch waits for more before it is sent (at most half the time to its earliest deadline, so at most half of -redis-timeout): fewer, larger script calls cost Redis less CPU per decision, each request waits up to this much longer; 0 sends at once")
}

// usesRedis reports whether the counters live in Redis: some -redis-* flag
// was given a value, on the command line or by its RLS_ variable, even one
// equal to its default, such as -redis-timeout 15ms. An address is then
// required (so that a Redis flag without one is an error, not a silent
// in-memory store). An empty value selects nothing: -redis-url "" asks for
// the in-memory store.
func (c *options) usesRedis() bool { return len(c.redisGiven) > 0 }
