package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/config"
)

// TestReferenceEnv maps envoyproxy/ratelimit's variables onto options:
// formats, precedence (flag > RLS_ > reference > default) and errors that
// name the variable.
func TestReferenceEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(o *options) string // "" when o is right, else what is wrong
		wantErr string
	}{
		{"defaults", nil, map[string]string{"RLS_CONFIG": "r"}, func(o *options) string {
			return want(o.httpAddr == ":8080" && o.grpcAddr == ":8081" && o.debugAddr == "" && o.metricsAddr == "" && !o.usesRedis(), "default listeners and memory store", o)
		}, ""},
		{"host and port", nil, map[string]string{"RLS_CONFIG": "r", "HOST": "127.0.0.1", "PORT": "9000", "GRPC_HOST": "::1", "GRPC_PORT": "9001", "DEBUG_PORT": "9002"}, func(o *options) string {
			return want(o.httpAddr == "127.0.0.1:9000" && o.grpcAddr == "[::1]:9001" && o.debugAddr == "0.0.0.0:9002", "addresses from HOST/PORT", o)
		}, ""},
		{"grpc uds", nil, map[string]string{"RLS_CONFIG": "r", "GRPC_UDS": "/tmp/rl.sock", "GRPC_PORT": "1"}, func(o *options) string {
			return want(o.grpcAddr == "unix:///tmp/rl.sock", "GRPC_UDS wins over GRPC_PORT", o)
		}, ""},
		{"RLS_ beats reference", nil, map[string]string{"RLS_CONFIG": "r", "RLS_HTTP_ADDR": "127.0.0.1:1", "PORT": "2"}, func(o *options) string {
			return want(o.httpAddr == "127.0.0.1:1" && hasNote(o, "PORT", "wins"), "RLS_HTTP_ADDR and a note on PORT", o)
		}, ""},
		{"flag beats RLS_ and reference", []string{"-http-addr", "127.0.0.1:3"}, map[string]string{"RLS_CONFIG": "r", "RLS_HTTP_ADDR": "127.0.0.1:1", "PORT": "2"}, func(o *options) string {
			return want(o.httpAddr == "127.0.0.1:3", "the flag's address", o)
		}, ""},
		{"runtime path", nil, map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit"}, func(o *options) string {
			return want(o.configPath == "/data/ratelimit/config", "/data/ratelimit/config", o)
		}, ""},
		{"runtime app directory", nil, map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_APPDIRECTORY": "rules"}, func(o *options) string {
			return want(o.configPath == "/data/rules", "/data/rules", o)
		}, ""},
		{"RLS_CONFIG beats RUNTIME_ROOT", nil, map[string]string{"RLS_CONFIG": "r", "RUNTIME_ROOT": "/data"}, func(o *options) string {
			return want(o.configPath == "r", "RLS_CONFIG", o)
		}, ""},
		{"no rules anywhere", nil, nil, nil, "-config (or RLS_CONFIG) is required"},
		{"redis single tcp", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "REDIS_POOL_SIZE": "7", "REDIS_AUTH": "user:pa:ss", "REDIS_TIMEOUT": "2s"}, func(o *options) string {
			r := o.redis
			return want(o.usesRedis() && r.mode == "single" && r.addrs == "redis:6379" && r.poolSize == 7 && r.username == "user" && r.password == "pa:ss" && o.redisTimeout == 2*time.Second && o.redisTimeoutCap == 2*time.Second,
				"single redis:6379, pool 7, user and password, 2s for a call without a deadline and at most", o)
		}, ""},
		// REDIS_TIMEOUT is the reference's client timeout, 10s by default:
		// no call waits longer, one without a deadline waits that long.
		{"redis timeout: the reference's default", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379"}, func(o *options) string {
			return want(o.redisTimeout == 10*time.Second && o.redisTimeoutCap == 10*time.Second, "10s and a 10s cap", o)
		}, ""},
		{"redis timeout 0: none", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "REDIS_TIMEOUT": "0s"}, func(o *options) string {
			return want(o.redisTimeout == 10*time.Second && o.redisTimeoutCap == 0, "10s and no cap", o)
		}, ""},
		{"redis timeout: a flag wins", []string{"-redis-timeout-cap", "15ms"}, map[string]string{"RLS_CONFIG": "r", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "REDIS_TIMEOUT": "2s"}, func(o *options) string {
			return want(o.redisTimeout == 15*time.Millisecond && o.redisTimeoutCap == 15*time.Millisecond && hasNote(o, "REDIS_TIMEOUT", "wins"), "the sidecar's defaults and the flag's cap", o)
		}, ""},
		{"redis timeout without redis", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_TIMEOUT": "2s"}, func(o *options) string {
			return want(!o.usesRedis() && o.redisTimeout == 15*time.Millisecond && o.redisTimeoutCap == 0 && hasNote(o, "REDIS_TIMEOUT", "in memory"), "memory store, defaults and a note", o)
		}, ""},
		{"the sidecar's own flags: no cap", []string{"-redis-url", "redis://h:1/0"}, map[string]string{"RLS_CONFIG": "r"}, func(o *options) string {
			return want(o.redisTimeout == 15*time.Millisecond && o.redisTimeoutCap == 0, "15ms without a deadline, no cap", o)
		}, ""},
		// REQUEST_TIMEOUT (newer than f2fb157): a deadline on cache work
		// that never extends an earlier one; the shorter of it and
		// REDIS_TIMEOUT bounds every call.
		{"request timeout under redis timeout", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "REQUEST_TIMEOUT": "50ms"}, func(o *options) string {
			return want(o.redisTimeout == 50*time.Millisecond && o.redisTimeoutCap == 50*time.Millisecond, "50ms without a deadline and at most", o)
		}, ""},
		{"request timeout over redis timeout", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "REDIS_TIMEOUT": "2s", "REQUEST_TIMEOUT": "5s"}, func(o *options) string {
			return want(o.redisTimeout == 2*time.Second && o.redisTimeoutCap == 2*time.Second, "REDIS_TIMEOUT's 2s, the shorter", o)
		}, ""},
		{"request timeout with redis timeout 0", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "REDIS_TIMEOUT": "0", "REQUEST_TIMEOUT": "3s"}, func(o *options) string {
			return want(o.redisTimeout == 3*time.Second && o.redisTimeoutCap == 3*time.Second, "3s without a deadline and at most", o)
		}, ""},
		{"request timeout 0: off", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "REQUEST_TIMEOUT": "0s"}, func(o *options) string {
			return want(o.redisTimeout == 10*time.Second && o.redisTimeoutCap == 10*time.Second, "REDIS_TIMEOUT's default alone", o)
		}, ""},
		{"request timeout without redis", nil, map[string]string{"RLS_CONFIG": "r", "REQUEST_TIMEOUT": "1s"}, func(o *options) string {
			return want(o.redisTimeoutCap == 0 && hasNote(o, "REQUEST_TIMEOUT", "in memory"), "no cap and a note", o)
		}, ""},
		{"negative request timeout", nil, map[string]string{"RLS_CONFIG": "r", "REQUEST_TIMEOUT": "-1s"}, nil, `REQUEST_TIMEOUT="-1s": want a duration of 0 or more`},
		{"max concurrent requests", nil, map[string]string{"RLS_CONFIG": "r", "MAX_CONCURRENT_REQUESTS": "100"}, func(o *options) string {
			return want(o.maxConcurrent == 100 && !hasNote(o, "MAX_CONCURRENT_REQUESTS", ""), "a cap of 100, no note", o)
		}, ""},
		{"max concurrent requests 0: no cap", nil, map[string]string{"RLS_CONFIG": "r", "MAX_CONCURRENT_REQUESTS": "0"}, func(o *options) string {
			return want(o.maxConcurrent == 0 && !hasNote(o, "MAX_CONCURRENT_REQUESTS", ""), "no cap, no note", o)
		}, ""},
		{"max concurrent requests: the flag wins", []string{"-max-concurrent-requests", "7"}, map[string]string{"RLS_CONFIG": "r", "MAX_CONCURRENT_REQUESTS": "100"}, func(o *options) string {
			return want(o.maxConcurrent == 7 && hasNote(o, "MAX_CONCURRENT_REQUESTS", "wins"), "the flag's 7 and a note", o)
		}, ""},
		{"negative max concurrent requests", nil, map[string]string{"RLS_CONFIG": "r", "MAX_CONCURRENT_REQUESTS": "-2"}, nil, `MAX_CONCURRENT_REQUESTS="-2": want a whole number, 0 or more`},
		{"bad max concurrent requests", nil, map[string]string{"RLS_CONFIG": "r", "MAX_CONCURRENT_REQUESTS": "lots"}, nil, `MAX_CONCURRENT_REQUESTS="lots": want a whole number, 0 or more`},
		{"negative -max-concurrent-requests", []string{"-max-concurrent-requests", "-1"}, map[string]string{"RLS_CONFIG": "r"}, nil, `-max-concurrent-requests -1: want 0 (no cap) or more`},
		{"calendar month: warned", nil, map[string]string{"RLS_CONFIG": "r", "USE_CALENDAR_MONTH_RATE_LIMIT": "true"}, func(o *options) string {
			return want(hasWarning(o, "USE_CALENDAR_MONTH_RATE_LIMIT", "30 days"), "a warning", o)
		}, ""},
		{"bad calendar month", nil, map[string]string{"RLS_CONFIG": "r", "USE_CALENDAR_MONTH_RATE_LIMIT": "yes please"}, nil, `USE_CALENDAR_MONTH_RATE_LIMIT="yes please"`},
		{"request headers: warned", nil, map[string]string{"RLS_CONFIG": "r", "LIMIT_REQUEST_HEADERS_ENABLED": "true", "LIMIT_REQUEST_LIMIT_HEADER": "X-Limit"}, func(o *options) string {
			return want(hasWarning(o, "LIMIT_REQUEST_HEADERS_ENABLED", "upstream request") && hasNote(o, "LIMIT_REQUEST_LIMIT_HEADER", "not used"), "a warning and a note", o)
		}, ""},
		{"readonly and sanitize: noted", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR": "true", "SANITIZE_DESCRIPTOR_METRIC_DOTS": "true"}, func(o *options) string {
			return want(hasNote(o, "REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR", "READONLY") && hasNote(o, "SANITIZE_DESCRIPTOR_METRIC_DOTS", "statsd") && !hasWarning(o, "REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR", ""), "two notes, no warning", o)
		}, ""},
		{"bad redis timeout", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "REDIS_TIMEOUT": "soon"}, nil, `REDIS_TIMEOUT="soon"`},
		{"redis single unix by default", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_URL": "/var/run/redis.sock", "REDIS_AUTH": "secret"}, func(o *options) string {
			return want(o.redisURL == "unix:///var/run/redis.sock" && o.redis.username == "" && o.redis.password == "secret", "unix socket URL and password", o)
		}, ""},
		{"backend redis without url", nil, map[string]string{"RLS_CONFIG": "r", "BACKEND_TYPE": "redis"}, func(o *options) string {
			return want(o.redisURL == "unix:///var/run/nutcracker/ratelimit.sock", "the reference's default socket", o)
		}, ""},
		{"redis sentinel", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster,s1:26379,s2:26379", "REDIS_SENTINEL_AUTH": "sp"}, func(o *options) string {
			r := o.redis
			return want(r.mode == "sentinel" && r.masterName == "mymaster" && r.addrs == "s1:26379,s2:26379" && r.sentinelPass == "sp", "sentinel mymaster over s1, s2", o)
		}, ""},
		{"redis cluster with tls", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "cluster", "REDIS_URL": "a:1,b:2", "REDIS_TLS": "true", "REDIS_TLS_CACERT": "ca.pem", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"}, func(o *options) string {
			r := o.redis
			return want(r.mode == "cluster" && r.addrs == "a:1,b:2" && r.tls && r.tlsCA == "ca.pem" && r.tlsSkipHostname && !r.tlsInsecure, "cluster a:1,b:2 over TLS", o)
		}, ""},
		{"RLS_REDIS_URL beats REDIS_URL", nil, map[string]string{"RLS_CONFIG": "r", "RLS_REDIS_URL": "redis://x:1/0", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "y:2"}, func(o *options) string {
			return want(o.redisURL == "redis://x:1/0" && o.redis.addrs == "", "RLS_REDIS_URL only", o)
		}, ""},
		{"redis setting without redis", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_POOL_SIZE": "5"}, func(o *options) string {
			return want(!o.usesRedis() && hasNote(o, "REDIS_POOL_SIZE", "in memory"), "memory store and a note", o)
		}, ""},
		{"behaviour", nil, map[string]string{"RLS_CONFIG": "r", "LOG_LEVEL": "WARNING", "LOG_FORMAT": "text", "CACHE_KEY_PREFIX": "p", "NEAR_LIMIT_RATIO": "0.9",
			"LOCAL_CACHE_SIZE_IN_BYTES": "0", "SHADOW_MODE": "true", "QUOTA_MODE": "1", "RESPONSE_DYNAMIC_METADATA": "true", "MERGE_DOMAIN_CONFIG": "true",
			"GRPC_MAX_CONNECTION_AGE": "1h", "GRPC_MAX_CONNECTION_AGE_GRACE": "1m"}, func(o *options) string {
			return want(o.logLevel == "warn" && o.logFormat == "console" && o.keyPrefix == "p" && o.nearLimitRatio == 0.9 && !o.overLimitCache &&
				o.shadowMode && o.quotaMode && o.dynamicMetadata && o.mergeDomains && o.grpcMaxAge == time.Hour && o.grpcMaxAgeGrace == time.Minute, "every behaviour variable applied", o)
		}, ""},
		{"reference keys", nil, map[string]string{"RLS_CONFIG": "r", "RLS_REFERENCE_KEYS": "true", "CACHE_KEY_PREFIX": "p:", "EXPIRATION_JITTER_MAX_SECONDS": "30"}, func(o *options) string {
			k := o.refKeys
			return want(k.enabled && k.prefix == "p:" && k.jitter == 30*time.Second && o.keyPrefix == "p:", "reference keys with prefix p: and 30s jitter", o)
		}, ""},
		{"reference keys defaults", []string{"-reference-keys"}, map[string]string{"RLS_CONFIG": "r"}, func(o *options) string {
			k := o.refKeys
			return want(k.enabled && k.prefix == "" && k.jitter == 300*time.Second && o.keyPrefix == "ratelimit", "the reference's empty prefix and 300s jitter", o)
		}, ""},
		{"reference key jitter not whole", nil, map[string]string{"RLS_CONFIG": "r", "RLS_REFERENCE_KEY_JITTER": "1500ms"}, nil, "-reference-key-jitter 1.5s"},
		{"reference jitter malformed", nil, map[string]string{"RLS_CONFIG": "r", "EXPIRATION_JITTER_MAX_SECONDS": "-1"}, nil, "EXPIRATION_JITTER_MAX_SECONDS"},
		{"local cache on", nil, map[string]string{"RLS_CONFIG": "r", "LOCAL_CACHE_SIZE_IN_BYTES": "1048576", "RLS_OVER_LIMIT_CACHE": "false"}, func(o *options) string {
			return want(!o.overLimitCache, "RLS_OVER_LIMIT_CACHE=false wins", o)
		}, ""},
		{"prometheus", nil, map[string]string{"RLS_CONFIG": "r", "USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":19001", "PROMETHEUS_PATH": "/stats/prometheus"}, func(o *options) string {
			return want(o.metricsAddr == ":19001" && o.metricsPath == "/stats/prometheus", "metrics on :19001", o)
		}, ""},
		{"prometheus response time in milliseconds", nil, map[string]string{"RLS_CONFIG": "r", "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS": "true"}, func(o *options) string {
			return want(o.responseTimeMs, "-metrics-response-time-ms", o)
		}, ""},
		{"bad prometheus response time", nil, map[string]string{"RLS_CONFIG": "r", "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS": "ms"}, nil, `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS="ms"`},
		{"cluster pipeline parallelism", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "CLUSTER", "REDIS_URL": "a:1,b:2",
			"REDIS_CLUSTER_PIPELINE_PARALLELISM": "8", "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM": "4"}, func(o *options) string {
			return want(o.redis.mode == "cluster" && o.redis.batchWorkers == config.DefaultRedisBatchWorkers && hasNote(o, "REDIS_CLUSTER_PIPELINE_PARALLELISM", "one script call per node") &&
				hasNote(o, "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", "one Redis"), "cluster, batching unchanged, two notes", o)
		}, ""},
		{"bad cluster pipeline parallelism", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_CLUSTER_PIPELINE_PARALLELISM": "auto"}, nil, `REDIS_CLUSTER_PIPELINE_PARALLELISM="auto"`},
		{"negative cluster pipeline parallelism", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "cluster", "REDIS_URL": "a:1",
			"REDIS_CLUSTER_PIPELINE_PARALLELISM": "-1"}, nil, "REDIS_CLUSTER_PIPELINE_PARALLELISM=-1: want 0"},
		{"redis startup retry", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379", "REDIS_STARTUP_INITIAL_INTERVAL": "2s",
			"REDIS_STARTUP_MAX_INTERVAL": "1m", "REDIS_STARTUP_MAX_ELAPSED_TIME": "5m"}, func(o *options) string {
			st := o.redis.startup
			return want(st.initial == 2*time.Second && st.max == time.Minute && st.maxElapsed == 5*time.Minute && st.enabled(), "start-up wait 2s to 1m, giving up after 5m", o)
		}, ""},
		{"redis startup defaults", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379"}, func(o *options) string {
			return want(!o.redis.startup.enabled(), "no start-up wait: the health loop's pings, for ever", o)
		}, ""},
		{"redis startup without redis", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_STARTUP_MAX_ELAPSED_TIME": "5m"}, func(o *options) string {
			return want(!o.usesRedis() && hasNote(o, "REDIS_STARTUP_MAX_ELAPSED_TIME", "in memory"), "memory store and a note", o)
		}, ""},
		{"bad redis startup interval", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_URL": "a:1", "REDIS_STARTUP_INITIAL_INTERVAL": "1"}, nil, `REDIS_STARTUP_INITIAL_INTERVAL="1"`},
		{"redis startup initial above the max default", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "a:1", "REDIS_STARTUP_INITIAL_INTERVAL": "1m"}, func(o *options) string {
			_, err := redisOptions(o) // the Redis flags are checked together, when the client is built
			return want(err == nil && o.redis.startup.initial == time.Minute && o.redis.startup.max == 30*time.Second, "accepted, as the reference does (its waits are then the max)", o)
		}, ""},
		{"bad redis startup max", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "a:1", "REDIS_STARTUP_MAX_ELAPSED_TIME": "-1s"}, func(o *options) string {
			_, err := redisOptions(o)
			return want(err != nil && strings.Contains(err.Error(), "-redis-startup-max-elapsed -1s: want 0"), "a problem with the elapsed time", o)
		}, ""},
		{"prometheus off", nil, map[string]string{"RLS_CONFIG": "r", "PROMETHEUS_ADDR": ":19001"}, func(o *options) string {
			return want(o.metricsAddr == "" && hasNote(o, "PROMETHEUS_ADDR", "USE_PROMETHEUS"), "no metrics listener, a note", o)
		}, ""},
		{"replaced variables", nil, map[string]string{"RLS_CONFIG": "r", "USE_STATSD": "false", "STATSD_HOST": "s", "BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "m:11211",
			"REDIS_PERSECOND": "true", "REDIS_PIPELINE_WINDOW": "150us", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true", "RUNTIME_IGNOREDOTFILES": "false"}, func(o *options) string {
			for name, w := range map[string]string{"USE_STATSD": "Prometheus", "STATSD_HOST": "Prometheus", "BACKEND_TYPE": "memcached", "MEMCACHE_HOST_PORT": "memcached",
				"REDIS_PERSECOND": "one Redis", "REDIS_PIPELINE_WINDOW": "batch", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "never counts",
				"RUNTIME_IGNOREDOTFILES": "always skipped"} {
				if !hasNote(o, name, w) {
					return "a note on " + name + " saying " + w
				}
			}
			return ""
		}, ""},
		{"tracing", nil, map[string]string{"RLS_CONFIG": "r", "TRACING_ENABLED": "true", "TRACING_SERVICE_NAME": "rl", "TRACING_SERVICE_NAMESPACE": "gw",
			"TRACING_SERVICE_INSTANCE_ID": "pod-1", "TRACING_EXPORTER_PROTOCOL": "grpc", "TRACING_SAMPLING_RATE": "0.25"}, func(o *options) string {
			t := o.tracing
			return want(t.enabled && t.opts.ServiceName == "rl" && t.opts.ServiceNamespace == "gw" && t.opts.ServiceInstanceID == "pod-1" &&
				t.opts.Protocol == "grpc" && t.opts.SamplingRate == 0.25, "every tracing variable applied", o)
		}, ""},
		{"tracing defaults", nil, map[string]string{"RLS_CONFIG": "r", "TRACING_ENABLED": "true"}, func(o *options) string {
			t := o.tracing
			return want(t.enabled && t.opts.ServiceName == "RateLimit" && t.opts.Protocol == "http" && t.opts.SamplingRate == 1, "the reference's tracing defaults", o)
		}, ""},
		{"tracing flag wins", []string{"-tracing-sampling-rate", "0.5"}, map[string]string{"RLS_CONFIG": "r", "TRACING_ENABLED": "true", "TRACING_SAMPLING_RATE": "0.1"}, func(o *options) string {
			return want(o.tracing.opts.SamplingRate == 0.5, "the flag's sampling rate", o)
		}, ""},
		{"tracing off ignores protocol", nil, map[string]string{"RLS_CONFIG": "r", "TRACING_EXPORTER_PROTOCOL": "zipkin"}, func(o *options) string {
			return want(!o.tracing.enabled, "tracing off", o)
		}, ""},
		{"bad tracing protocol", nil, map[string]string{"RLS_CONFIG": "r", "TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "zipkin"}, nil, `exporter protocol "zipkin"`},
		{"bad sampling rate", nil, map[string]string{"RLS_CONFIG": "r", "TRACING_ENABLED": "true", "TRACING_SAMPLING_RATE": "2"}, nil, "sampling rate 2"},
		{"bad sampling number", nil, map[string]string{"RLS_CONFIG": "r", "TRACING_SAMPLING_RATE": "all"}, nil, "TRACING_SAMPLING_RATE"},
		{"bad port", nil, map[string]string{"RLS_CONFIG": "r", "PORT": "http"}, nil, `PORT="http": want a port number`},
		{"bad grpc port", nil, map[string]string{"RLS_CONFIG": "r", "GRPC_PORT": "70000"}, nil, `GRPC_PORT="70000"`},
		{"bad redis type", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_URL": "a:1", "REDIS_TYPE": "ring"}, nil, `REDIS_TYPE="ring"`},
		{"bad socket type", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_URL": "a:1", "REDIS_SOCKET_TYPE": "udp"}, nil, `REDIS_SOCKET_TYPE="udp"`},
		{"sentinel without master", nil, map[string]string{"RLS_CONFIG": "r", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "s1:1", "REDIS_TYPE": "sentinel"}, nil, "mastername,host:port"},
		{"bad backend", nil, map[string]string{"RLS_CONFIG": "r", "BACKEND_TYPE": "etcd"}, nil, `BACKEND_TYPE="etcd"`},
		{"bad bool", nil, map[string]string{"RLS_CONFIG": "r", "SHADOW_MODE": "yes"}, nil, `SHADOW_MODE="yes"`},
		{"bad duration", nil, map[string]string{"RLS_CONFIG": "r", "GRPC_MAX_CONNECTION_AGE": "24"}, nil, `GRPC_MAX_CONNECTION_AGE="24"`},
		{"bad log level", nil, map[string]string{"RLS_CONFIG": "r", "LOG_LEVEL": "loud"}, nil, `LOG_LEVEL="loud"`},
		{"bad ratio", nil, map[string]string{"RLS_CONFIG": "r", "NEAR_LIMIT_RATIO": "lots"}, nil, "NEAR_LIMIT_RATIO"},
		{"grpc tls of envoy gateway", nil, map[string]string{"RLS_CONFIG": "r", "GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/certs/tls.crt",
			"GRPC_SERVER_TLS_KEY": "/certs/tls.key", "GRPC_SERVER_TLS_CA_CERT": "/certs/ca.crt"}, func(o *options) string {
			g := o.grpcTLS
			return want(g.enabled() && g.cert == "/certs/tls.crt" && g.key == "/certs/tls.key" && g.clientCA == "/certs/ca.crt" && g.clientSAN == "", "mutual TLS from /certs", o)
		}, ""},
		{"grpc tls of the reference", nil, map[string]string{"RLS_CONFIG": "r", "GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "c",
			"GRPC_SERVER_TLS_KEY": "k", "GRPC_CLIENT_TLS_CACERT": "ca", "GRPC_CLIENT_TLS_SAN": "envoy"}, func(o *options) string {
			g := o.grpcTLS
			return want(g.cert == "c" && g.key == "k" && g.clientCA == "ca" && g.clientSAN == "envoy", "mutual TLS with a SAN", o)
		}, ""},
		{"grpc tls off", nil, map[string]string{"RLS_CONFIG": "r", "GRPC_SERVER_USE_TLS": "false", "GRPC_SERVER_TLS_CERT": "c", "GRPC_SERVER_TLS_KEY": "k"}, func(o *options) string {
			return want(!o.grpcTLS.enabled() && hasNote(o, "GRPC_SERVER_TLS_CERT", "plaintext"), "plaintext, as the reference, and a note", o)
		}, ""},
		{"RLS_GRPC_TLS_CERT beats GRPC_SERVER_TLS_CERT", nil, map[string]string{"RLS_CONFIG": "r", "RLS_GRPC_TLS_CERT": "mine", "GRPC_SERVER_USE_TLS": "true",
			"GRPC_SERVER_TLS_CERT": "c", "GRPC_SERVER_TLS_KEY": "k"}, func(o *options) string {
			return want(o.grpcTLS.cert == "mine" && o.grpcTLS.key == "k", "RLS_GRPC_TLS_CERT and GRPC_SERVER_TLS_KEY", o)
		}, ""},
		{"grpc tls without certificate", nil, map[string]string{"RLS_CONFIG": "r", "GRPC_SERVER_USE_TLS": "true"}, nil, "needs -grpc-tls-cert and -grpc-tls-key"},
		{"grpc tls without key", []string{"-grpc-tls-cert", "c"}, map[string]string{"RLS_CONFIG": "r"}, nil, "needs -grpc-tls-cert and -grpc-tls-key"},
		{"grpc tls san without ca", nil, map[string]string{"RLS_CONFIG": "r", "GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "c",
			"GRPC_SERVER_TLS_KEY": "k", "GRPC_CLIENT_TLS_SAN": "envoy"}, nil, "GRPC_CLIENT_TLS_SAN) needs"},
		{"grpc tls two CAs", nil, map[string]string{"RLS_CONFIG": "r", "GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "c",
			"GRPC_SERVER_TLS_KEY": "k", "GRPC_CLIENT_TLS_CACERT": "a", "GRPC_SERVER_TLS_CA_CERT": "b"}, nil, "GRPC_CLIENT_TLS_CACERT=\"a\" and GRPC_SERVER_TLS_CA_CERT=\"b\""},
		{"bad grpc tls bool", nil, map[string]string{"RLS_CONFIG": "r", "GRPC_SERVER_USE_TLS": "yes"}, nil, `GRPC_SERVER_USE_TLS="yes"`},
		{"xds", nil, map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "eg:18001", "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
			"CONFIG_GRPC_XDS_NODE_METADATA": "a=b", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x:y", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
			"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "1s", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "5s", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "0.2",
			"XDS_CLIENT_BACKOFF_JITTER": "false", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "1000", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "3s"}, func(o *options) string {
			x := o.xds
			return want(x.configType == configXDS && x.serverURL == "eg:18001" && x.nodeID == "envoy-ratelimit" && x.nodeMetadata == "a=b" &&
				x.headers == "x:y" && x.forceStart && x.backoffInitial == time.Second && x.backoffMax == 5*time.Second && x.backoffRandom == 0.2 &&
				!x.backoffJitter && x.maxMsgSize == 1000 && hasNote(o, "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "XDS_CLIENT_BACKOFF"), "every xDS variable applied", o)
		}, ""},
		{"xds ignores the rules directory", nil, map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit"}, func(o *options) string {
			return want(o.xds.configType == configXDS && hasNote(o, "-config", "from xDS"), "xDS, and a note on -config", o)
		}, ""},
		{"file", nil, map[string]string{"CONFIG_TYPE": "FILE"}, nil, "-config (or RLS_CONFIG) is required"},
		{"bad config type", nil, map[string]string{"CONFIG_TYPE": "GRPC_XDS_DELTA"}, nil, `CONFIG_TYPE="GRPC_XDS_DELTA": want FILE or GRPC_XDS_SOTW`},
		{"bad backoff", nil, map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "2"}, nil, "-xds-backoff-random-factor 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o, err := parseOptions("test", tt.args, env(tt.env), io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseOptions(%q, %v) error = %v, want %q", tt.args, tt.env, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseOptions(%q, %v) = %v", tt.args, tt.env, err)
			}
			if msg := tt.check(o); msg != "" {
				t.Errorf("parseOptions(%q, %v) = %+v, notes %v; want %s", tt.args, tt.env, *o, o.refNotes, msg)
			}
		})
	}
}

func want(ok bool, what string, _ *options) string {
	if ok {
		return ""
	}
	return what
}

// hasWarning reports whether a note on name containing text is a warning.
func hasWarning(o *options, name, text string) bool {
	for _, n := range o.refNotes {
		if n.name == name && n.warn && strings.Contains(n.text, text) {
			return true
		}
	}
	return false
}

func hasNote(o *options, name, text string) bool {
	for _, n := range o.refNotes {
		if n.name == name && strings.Contains(n.text, text) {
			return true
		}
	}
	return false
}

// TestReferenceEnvDefaultRuntimeRoot: with no RUNTIME_ variable, the
// reference's default rules directory is used when it exists.
func TestReferenceEnvDefaultRuntimeRoot(t *testing.T) {
	t.Parallel()
	for _, exists := range []bool{false, true} {
		m, err := readReferenceEnv(env(nil), func(string) bool { return exists })
		if err != nil {
			t.Fatal(err)
		}
		got := len(m.sets) == 1 && m.sets[0].flags[0] == [2]string{"config", filepath.Join(refDefaultRuntimeRoot, "config")}
		if got != exists {
			t.Errorf("with the default directory existing %v: sets %v", exists, m.sets)
		}
	}
}

// TestReferenceEnvDocumented keeps docs/compatibility.md and
// docs/configuration.md naming every reference variable.
func TestReferenceEnvDocumented(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{"compatibility.md", "configuration.md"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "docs", doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range refVars {
			for _, n := range r.names {
				if !strings.Contains(string(data), "`"+n+"`") {
					t.Errorf("docs/%s does not name `%s`", doc, n)
				}
			}
		}
	}
}
