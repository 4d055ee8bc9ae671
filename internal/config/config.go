// Package config holds what the command's process settings promise to
// others, such as deployment manifests and their tests: the flags' defaults
// and the environment variable of each flag. The command registers its
// flags with these values, so the two cannot drift.
package config

import (
	"strings"
	"time"
)

// EnvPrefix starts the environment variable of every flag; see EnvName.
const EnvPrefix = "RLS_"

// EnvName returns the environment variable of a flag: EnvPrefix and the
// flag's name in upper snake case ("redis-url" -> "RLS_REDIS_URL").
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// The defaults of the flags that are not empty, zero or false.
const (
	// DefaultGRPCAddr is -grpc-addr's: ratelimit.v3 and grpc.health.v1.
	DefaultGRPCAddr = ":8081"
	// DefaultHTTPAddr is -http-addr's: /healthcheck, /json, /rlconfig,
	// /healthz, /readyz, /rules and /metrics. It is envoyproxy/ratelimit's
	// HTTP port, so probes of GET /healthcheck on 8080 find it.
	DefaultHTTPAddr = ":8080"
	// DefaultMetricsPath is -metrics-path's.
	DefaultMetricsPath = "/metrics"
	// DefaultNearLimitRatio is -near-limit-ratio's, envoyproxy/ratelimit's
	// NEAR_LIMIT_RATIO default.
	DefaultNearLimitRatio = 0.8
	// DefaultKeyPrefix is -key-prefix's, the first part of every counter key.
	DefaultKeyPrefix = "ratelimit"
	// DefaultReferenceKeyJitter is -reference-key-jitter's,
	// envoyproxy/ratelimit's EXPIRATION_JITTER_MAX_SECONDS default.
	DefaultReferenceKeyJitter = 300 * time.Second
	// DefaultLogLevel is -log-level's.
	DefaultLogLevel = "info"
	// DefaultLogFormat is -log-format's.
	DefaultLogFormat = "json"
	// DefaultShutdownTimeout is -shutdown-timeout's.
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultHealthInterval is -health-interval's.
	DefaultHealthInterval = time.Second
	// DefaultClockSyncInterval is -clock-sync-interval's.
	DefaultClockSyncInterval = 30 * time.Second
	// DefaultOverLimitCache is -over-limit-cache's.
	DefaultOverLimitCache = true
	// DefaultMaxDescriptors is -max-descriptors': the most rules an Envoy
	// Gateway rate limit policy may hold (256), each of which can add a
	// descriptor to one request.
	DefaultMaxDescriptors = 256
	// DefaultMaxEntries is -max-entries'.
	DefaultMaxEntries = 32
	// DefaultMaxEntryBytes is -max-entry-bytes'.
	DefaultMaxEntryBytes = 1024
	// DefaultMaxHits is -max-hits'.
	DefaultMaxHits uint64 = 1<<32 - 1
	// DefaultRLQS is -rlqs': the Rate Limit Quota Service is served, so an
	// Envoy pointed at the gRPC port needs nothing else.
	DefaultRLQS = true
	// DefaultRLQSAssignmentTTL is -rlqs-assignment-ttl's: three of Envoy
	// 1.40's 5 s report intervals, so one lost report does not expire an
	// assignment.
	DefaultRLQSAssignmentTTL = 15 * time.Second
	// DefaultRLQSMaxStreams is -rlqs-max-streams'.
	DefaultRLQSMaxStreams = 10_000
	// DefaultRLQSMaxBuckets is -rlqs-max-buckets'.
	DefaultRLQSMaxBuckets = 1_000

	// DefaultRedisTimeout is -redis-timeout's, below Envoy's 20ms filter
	// timeout.
	DefaultRedisTimeout = 15 * time.Millisecond
	// DefaultRedisMode is -redis-mode's.
	DefaultRedisMode = "single"
	// DefaultRedisBreakerFailures is -redis-breaker-failures'.
	DefaultRedisBreakerFailures = 5
	// DefaultRedisBreakerFailFor is -redis-breaker-fail-for's.
	DefaultRedisBreakerFailFor = 250 * time.Millisecond
	// DefaultRedisBreakerOpenFor is -redis-breaker-open-for's.
	DefaultRedisBreakerOpenFor = time.Second
	// DefaultRedisBatchWorkers is -redis-batch-workers': the most batched
	// calls in flight; how many are out follows the round trip (see
	// DefaultRedisBatchSpacing).
	DefaultRedisBatchWorkers = 16
	// DefaultRedisBatchSpacing is -redis-batch-spacing's: while a batch is
	// out, the next leaves when it comes back or after this long.
	DefaultRedisBatchSpacing = time.Millisecond

	// DefaultTracingServiceName is -tracing-service-name's,
	// envoyproxy/ratelimit's TRACING_SERVICE_NAME default.
	DefaultTracingServiceName = "RateLimit"
	// DefaultTracingSamplingRate is -tracing-sampling-rate's: every trace
	// that starts here, as envoyproxy/ratelimit's TRACING_SAMPLING_RATE.
	DefaultTracingSamplingRate = 1.0
	// DefaultTracingExporterProtocol is -tracing-exporter-protocol's,
	// envoyproxy/ratelimit's TRACING_EXPORTER_PROTOCOL default.
	DefaultTracingExporterProtocol = "http"
)
