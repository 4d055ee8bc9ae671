package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// refDefaultRuntimeRoot is the reference's RUNTIME_ROOT default.
const refDefaultRuntimeRoot = "/srv/runtime_data/current"

// refDefaultRedisTimeout is the reference's REDIS_TIMEOUT default.
const refDefaultRedisTimeout = "10s"

// Notes of the variables this project replaces; docs/compatibility.md has
// the same words.
const (
	noteStats      = "not used: statsd is replaced by Prometheus metrics at /metrics on -http-addr (docs/operations.md#metrics)"
	noteXDSRetry   = "not used: reconnections to the xDS server are spaced by XDS_CLIENT_BACKOFF_* alone"
	noteMemcache   = "not used: memcached is not supported; counters are in Redis (REDIS_URL) or in memory"
	notePerSecond  = "not used: one Redis holds every window; per-second limits are not sent to a second Redis"
	notePipeline   = "not used: concurrent requests share Redis round trips by batching (-redis-batch-workers, -redis-batch-linger)"
	noteParallel   = "not used: on a Redis Cluster each batch is one script call per node, every node's call sent at once on one of its connections, never one call per key; -redis-batch-workers bounds the calls in flight on each node"
	noteHeaders    = "not used: the rate limit headers are those of docs/rules.md (x-ratelimit-*, retry-after), added by Envoy from the response"
	noteJitter     = "not used without -reference-keys: a counter expires when its window ends, with no jitter"
	notePoolEmpty  = "not used: a call waits for a free Redis connection until its deadline (see -redis-timeout)"
	noteHealthConn = "not used: readiness always pings the store (-health-interval)"
	noteHealthRule = "not used: health is SERVING only once rules are loaded and the store answers"
	noteMapper     = "not used: metric names are fixed (docs/operations.md#metrics)"
	noteSanitize   = "not used: it renames statsd metrics; Prometheus labels keep descriptor values as they are"
	noteReadOnly   = "not needed: a Redis connection that answers READONLY (a demoted master behind a Service or DNS name) is always closed, and the next call dials again"
)

// refVars is every environment variable of envoyproxy/ratelimit's settings,
// in its order.
var refVars = []refVar{
	{names: []string{"HOST", "PORT"}, defs: []string{"0.0.0.0", "8080"}, to: hostPort("http-addr", "PORT")},
	{names: []string{"DEBUG_HOST", "DEBUG_PORT"}, defs: []string{"0.0.0.0", "6070"}, to: hostPort("debug-addr", "DEBUG_PORT")},
	{names: []string{"GRPC_UDS", "GRPC_HOST", "GRPC_PORT"}, defs: []string{"", "0.0.0.0", "8081"}, to: refGRPCAddr},
	refFlag("GRPC_MAX_CONNECTION_AGE", "grpc-max-connection-age", refDuration, anyStore),
	refFlag("GRPC_MAX_CONNECTION_AGE_GRACE", "grpc-max-connection-age-grace", refDuration, anyStore),
	{names: []string{"GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT",
		"GRPC_SERVER_TLS_CA_CERT", "GRPC_CLIENT_TLS_SAN"}, defs: []string{"false"}, to: refGRPCTLS},
	refFlag("LOG_LEVEL", "log-level", refLogLevel, anyStore),
	refFlag("LOG_FORMAT", "log-format", refLogFormat, anyStore),
	{names: []string{"CONFIG_TYPE"}, to: refConfigType},
	refFlag("FORCE_START_WITHOUT_INITIAL_CONFIG", "force-start", boolConv, anyStore),
	// Newer than f2fb157 (the reference's settings at f9b242bf): its
	// REQUEST_TIMEOUT is read with REDIS_TIMEOUT below, as both bound a
	// Redis call.
	refFlag("MAX_CONCURRENT_REQUESTS", "max-concurrent-requests", refNonNegativeInt, anyStore),
	refFlag("CONFIG_GRPC_XDS_NODE_ID", "xds-node-id", nil, anyStore),
	refFlag("CONFIG_GRPC_XDS_NODE_METADATA", "xds-node-metadata", nil, anyStore),
	refFlag("CONFIG_GRPC_XDS_SERVER_URL", "xds-server-url", nil, anyStore),
	{names: []string{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL"}, note: noteXDSRetry},
	refFlag("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "xds-headers", nil, anyStore),
	refFlag("CONFIG_GRPC_XDS_SERVER_USE_TLS", "xds-tls", boolConv, anyStore),
	refFlag("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "xds-tls-cert", nil, anyStore),
	refFlag("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "xds-tls-key", nil, anyStore),
	refFlag("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "xds-tls-ca", nil, anyStore),
	refFlag("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "xds-tls-san", nil, anyStore),
	refFlag("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "xds-backoff-initial", refDuration, anyStore),
	refFlag("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "xds-backoff-max", refDuration, anyStore),
	refFlag("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "xds-backoff-random-factor", nil, anyStore),
	refFlag("XDS_CLIENT_BACKOFF_JITTER", "xds-backoff-jitter", boolConv, anyStore),
	refFlag("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "xds-max-msg-size", intConv, anyStore),
	{names: []string{"USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS", "USE_STATSD", "STATSD_HOST", "STATSD_PORT",
		"EXTRA_TAGS", "STATS_FLUSH_INTERVAL", "DISABLE_STATS"}, note: noteStats},
	{names: []string{"USE_PROMETHEUS", "PROMETHEUS_ADDR", "PROMETHEUS_PATH"}, defs: []string{"false", ":9090", "/metrics"}, to: refPrometheus},
	{names: []string{"PROMETHEUS_MAPPER_YAML"}, note: noteMapper},
	{names: []string{"SANITIZE_DESCRIPTOR_METRIC_DOTS"}, note: noteSanitize},
	refFlag("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "metrics-response-time-ms", boolConv, anyStore),
	{names: []string{"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY"}, defs: []string{refDefaultRuntimeRoot, "", "config"}, to: runtimePath, always: true},
	{names: []string{"RUNTIME_IGNOREDOTFILES"}, to: refIgnoreDotFiles},
	{names: []string{"RUNTIME_WATCH_ROOT"}, to: refWatchRoot},
	{names: []string{"EXPIRATION_JITTER_MAX_SECONDS"}, to: refJitter},
	{names: []string{"LOCAL_CACHE_SIZE_IN_BYTES"}, to: refLocalCache},
	refFlag("NEAR_LIMIT_RATIO", "near-limit-ratio", nil, anyStore),
	{names: []string{"CACHE_KEY_PREFIX"}, to: refCacheKeyPrefix},
	{names: []string{"BACKEND_TYPE"}, to: refBackendType},
	{names: []string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"}, to: refStopIncrement},
	// A month window here is the reference's default, 30 days from the epoch.
	{names: []string{"USE_CALENDAR_MONTH_RATE_LIMIT"}, to: refWarnWhenTrue("a MONTH limit keeps the reference's default window, 30 days counted from the Unix epoch, not the calendar month",
		"USE_CALENDAR_MONTH_RATE_LIMIT")},
	{names: []string{"LIMIT_RESPONSE_HEADERS_ENABLED", "LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER"}, note: noteHeaders},
	{names: []string{"LIMIT_REQUEST_HEADERS_ENABLED", "LIMIT_REQUEST_LIMIT_HEADER", "LIMIT_REQUEST_REMAINING_HEADER",
		"LIMIT_REQUEST_RESET_HEADER"}, defs: []string{"false"}, to: refWarnWhenTrue("no limit headers are added to the upstream request (request_headers_to_add); the answer's own headers are those of docs/rules.md",
		"LIMIT_REQUEST_HEADERS_ENABLED", "LIMIT_REQUEST_LIMIT_HEADER", "LIMIT_REQUEST_REMAINING_HEADER", "LIMIT_REQUEST_RESET_HEADER")},
	{names: []string{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"}, note: noteHealthRule},
	{names: []string{"REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_URL"}, defs: []string{"unix", "SINGLE", "/var/run/nutcracker/ratelimit.sock"}, to: refRedisAddr, always: true},
	refFlag("REDIS_POOL_SIZE", "redis-pool-size", intConv, redisOnly),
	{names: []string{"REDIS_AUTH"}, to: refRedisAuth("REDIS_AUTH", "redis-username", "redis-password")},
	refFlag("REDIS_TLS", "redis-tls", boolConv, redisOnly),
	refFlag("REDIS_TLS_CLIENT_CERT", "redis-tls-cert", nil, redisOnly),
	refFlag("REDIS_TLS_CLIENT_KEY", "redis-tls-key", nil, redisOnly),
	refFlag("REDIS_TLS_CACERT", "redis-tls-ca", nil, redisOnly),
	refFlag("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "redis-tls-skip-hostname-verification", boolConv, redisOnly),
	{names: []string{"REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT"}, note: notePipeline},
	{names: []string{"REDIS_CLUSTER_PIPELINE_PARALLELISM"}, to: refClusterParallelism},
	{names: []string{"REDIS_PERSECOND", "REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL",
		"REDIS_PERSECOND_POOL_SIZE", "REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_TLS", "REDIS_PERSECOND_SENTINEL_AUTH",
		"REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND_PIPELINE_LIMIT", "REDIS_PERSECOND_TIMEOUT",
		"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM"}, note: notePerSecond},
	{names: []string{"REDIS_SENTINEL_AUTH"}, to: refRedisAuth("REDIS_SENTINEL_AUTH", "redis-sentinel-username", "redis-sentinel-password")},
	{names: []string{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION"}, note: noteHealthConn},
	{names: []string{"REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR"}, note: noteReadOnly},
	{names: []string{"REDIS_TIMEOUT", "REQUEST_TIMEOUT"}, defs: []string{refDefaultRedisTimeout, "0"}, to: refRedisTimeout, always: true},
	refFlag("REDIS_STARTUP_INITIAL_INTERVAL", "redis-startup-initial-interval", refDuration, redisOnly),
	refFlag("REDIS_STARTUP_MAX_INTERVAL", "redis-startup-max-interval", refDuration, redisOnly),
	refFlag("REDIS_STARTUP_MAX_ELAPSED_TIME", "redis-startup-max-elapsed", refDuration, redisOnly),
	{names: []string{"REDIS_POOL_ON_EMPTY_BEHAVIOR"}, note: notePoolEmpty},
	{names: []string{"MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH", "MEMCACHE_TLS",
		"MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION"}, note: noteMemcache},
	refFlag("SHADOW_MODE", "shadow-mode", boolConv, anyStore),
	refFlag("QUOTA_MODE", "quota-mode", boolConv, anyStore),
	refFlag("RESPONSE_DYNAMIC_METADATA", "response-dynamic-metadata", boolConv, anyStore),
	refFlag("MERGE_DOMAIN_CONFIG", "merge-domains", boolConv, anyStore),
	refFlag("TRACING_ENABLED", "tracing", boolConv, anyStore),
	refFlag("TRACING_SERVICE_NAME", "tracing-service-name", nil, anyStore),
	refFlag("TRACING_SERVICE_NAMESPACE", "tracing-service-namespace", nil, anyStore),
	refFlag("TRACING_SERVICE_INSTANCE_ID", "tracing-service-instance-id", nil, anyStore),
	refFlag("TRACING_EXPORTER_PROTOCOL", "tracing-exporter-protocol", nil, anyStore),
	refFlag("TRACING_SAMPLING_RATE", "tracing-sampling-rate", nil, anyStore),
}

// refGRPCAddr: GRPC_UDS, else GRPC_HOST and GRPC_PORT.
func refGRPCAddr(m *refMapping, v []string) error {
	uds, hostAndPort := v[0], v[1:]
	from := []string{"GRPC_UDS", "GRPC_HOST", "GRPC_PORT"}
	if uds != "" {
		m.set(from, nil, "grpc-addr", "unix://"+uds)
		return nil
	}
	return hostPort("grpc-addr", "GRPC_PORT")(m, hostAndPort)
}

// refGRPCTLS maps the gRPC server's TLS variables onto the -grpc-tls*
// flags when GRPC_SERVER_USE_TLS is true; otherwise the reference serves
// plaintext and ignores them. The CA of the client certificates is
// GRPC_CLIENT_TLS_CACERT for the reference, GRPC_SERVER_TLS_CA_CERT in
// Envoy Gateway's Deployment: either asks for mutual TLS.
func refGRPCTLS(m *refMapping, v []string) error {
	useTLS, cert, key, clientCA, serverCA, san := v[0], v[1], v[2], v[3], v[4], v[5]
	on, err := refBool("GRPC_SERVER_USE_TLS", useTLS)
	if err != nil {
		return err
	}
	if !on {
		for _, n := range []string{"GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_SERVER_TLS_CA_CERT", "GRPC_CLIENT_TLS_SAN"} {
			if m.getenv(n) != "" {
				m.note(n, "not used without GRPC_SERVER_USE_TLS=true: the gRPC server serves plaintext", true)
			}
		}
		return nil
	}
	ca, caFrom := clientCA, []string{"GRPC_CLIENT_TLS_CACERT"}
	switch {
	case ca == "":
		ca, caFrom = serverCA, []string{"GRPC_SERVER_TLS_CA_CERT"}
	case serverCA != "" && serverCA != ca:
		return fmt.Errorf("GRPC_CLIENT_TLS_CACERT=%q and GRPC_SERVER_TLS_CA_CERT=%q: both name the CA of the client certificates; set one", ca, serverCA)
	}
	m.set([]string{"GRPC_SERVER_USE_TLS"}, nil, "grpc-tls", "true")
	for _, f := range []struct {
		from      []string
		flag, val string
	}{
		{[]string{"GRPC_SERVER_TLS_CERT"}, "grpc-tls-cert", cert},
		{[]string{"GRPC_SERVER_TLS_KEY"}, "grpc-tls-key", key},
		{caFrom, "grpc-tls-client-ca", ca},
		{[]string{"GRPC_CLIENT_TLS_SAN"}, "grpc-tls-client-san", san},
	} {
		if f.val != "" {
			m.set(f.from, nil, f.flag, f.val)
		}
	}
	return nil
}

// refLogLevel maps logrus's levels onto zap's.
func refLogLevel(name, v string) (string, error) {
	switch l := strings.ToLower(v); l {
	case "trace", "debug":
		return "debug", nil
	case "info":
		return "info", nil
	case "warn", "warning":
		return "warn", nil
	case "error", "fatal", "panic":
		return "error", nil
	}
	return "", fmt.Errorf("%s=%q: want trace, debug, info, warn, error, fatal or panic", name, v)
}

// refLogFormat maps text onto console.
func refLogFormat(name, v string) (string, error) {
	switch strings.ToLower(v) {
	case "text":
		return "console", nil
	case "json":
		return "json", nil
	}
	return "", fmt.Errorf("%s=%q: want text or json", name, v)
}

// refConfigType maps FILE and GRPC_XDS_SOTW onto -config-type.
func refConfigType(m *refMapping, v []string) error {
	switch v[0] {
	case "FILE":
		m.set([]string{"CONFIG_TYPE"}, nil, "config-type", configFile)
		return nil
	case "GRPC_XDS_SOTW":
		m.set([]string{"CONFIG_TYPE"}, nil, "config-type", configXDS)
		return nil
	}
	return fmt.Errorf("CONFIG_TYPE=%q: want FILE or GRPC_XDS_SOTW", v[0])
}

// refPrometheus serves metrics on PROMETHEUS_ADDR when USE_PROMETHEUS is
// true, as the reference does; they are on -http-addr's /metrics anyway.
func refPrometheus(m *refMapping, v []string) error {
	use, addr, path := v[0], v[1], v[2]
	on, err := refBool("USE_PROMETHEUS", use)
	if err != nil {
		return err
	}
	if !on {
		for _, n := range []string{"PROMETHEUS_ADDR", "PROMETHEUS_PATH"} {
			if m.getenv(n) != "" {
				m.note(n, "not used without USE_PROMETHEUS=true; metrics are at /metrics on -http-addr", false)
			}
		}
		return nil
	}
	if !strings.HasPrefix(path, "/") {
		return fmt.Errorf("PROMETHEUS_PATH=%q: want a path starting with /", path)
	}
	m.set([]string{"USE_PROMETHEUS", "PROMETHEUS_ADDR", "PROMETHEUS_PATH"}, nil, "metrics-addr", addr, "metrics-path", path)
	return nil
}

func refIgnoreDotFiles(m *refMapping, v []string) error {
	on, err := refBool("RUNTIME_IGNOREDOTFILES", v[0])
	if err == nil && !on {
		m.note("RUNTIME_IGNOREDOTFILES", "hidden files and directories (a ConfigMap's ..data) are always skipped", false)
	}
	return err
}

func refWatchRoot(m *refMapping, v []string) error {
	_, err := refBool("RUNTIME_WATCH_ROOT", v[0])
	if err == nil {
		m.note("RUNTIME_WATCH_ROOT", "either way the rules directory and its parent are watched, and a ConfigMap's ..data swap reloads", false)
	}
	return err
}

// refLocalCache: the reference's local cache of full counters is our
// over-limit cache; its size is not bounded by bytes.
func refLocalCache(m *refMapping, v []string) error {
	n, err := intConv("LOCAL_CACHE_SIZE_IN_BYTES", v[0])
	if err != nil {
		return err
	}
	m.set([]string{"LOCAL_CACHE_SIZE_IN_BYTES"}, nil, "over-limit-cache", fmt.Sprint(n != "0"))
	return nil
}

func refBackendType(m *refMapping, v []string) error {
	switch strings.ToLower(v[0]) {
	case "redis":
		return nil
	case "memcache":
		m.note("BACKEND_TYPE", noteMemcache, true)
		return nil
	}
	return fmt.Errorf("BACKEND_TYPE=%q: want redis or memcache", v[0])
}

// refCacheKeyPrefix maps CACHE_KEY_PREFIX onto -key-prefix, and verbatim
// onto -reference-key-prefix, the prefix of the reference's own keys.
func refCacheKeyPrefix(m *refMapping, v []string) error {
	m.set([]string{"CACHE_KEY_PREFIX"}, nil, "key-prefix", v[0])
	m.set([]string{"CACHE_KEY_PREFIX"}, nil, "reference-key-prefix", v[0])
	return nil
}

// refJitter maps EXPIRATION_JITTER_MAX_SECONDS (whole seconds) onto
// -reference-key-jitter, which only -reference-keys uses.
func refJitter(m *refMapping, v []string) error {
	n, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("EXPIRATION_JITTER_MAX_SECONDS=%q: want a whole number of seconds, >= 0", v[0])
	}
	m.set([]string{"EXPIRATION_JITTER_MAX_SECONDS"}, nil, "reference-key-jitter", strconv.FormatInt(n, 10)+"s")
	m.note("EXPIRATION_JITTER_MAX_SECONDS", noteJitter, false)
	return nil
}

func refStopIncrement(m *refMapping, v []string) error {
	_, err := refBool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", v[0])
	if err == nil {
		m.note("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "a denied request never counts here, whatever its value", false)
	}
	return err
}

// refClusterParallelism checks REDIS_CLUSTER_PIPELINE_PARALLELISM as the
// reference does (a whole number; below 0 stops a cluster's start) and
// notes why it is not needed: it bounds how many of one pipeline's per-key
// command groups the reference sends to a cluster at once (1, its default,
// one after another), and the sidecar sends no per-key groups.
func refClusterParallelism(m *refMapping, v []string) error {
	n, err := strconv.Atoi(v[0])
	if err != nil {
		return fmt.Errorf("REDIS_CLUSTER_PIPELINE_PARALLELISM=%q: want a whole number", v[0])
	}
	if n < 0 && strings.EqualFold(m.getenv("REDIS_TYPE"), "cluster") {
		return fmt.Errorf("REDIS_CLUSTER_PIPELINE_PARALLELISM=%d: want 0 (the pool size) or more", n)
	}
	m.note("REDIS_CLUSTER_PIPELINE_PARALLELISM", noteParallel, false)
	return nil
}

// refRedisAddr maps REDIS_SOCKET_TYPE, REDIS_TYPE and REDIS_URL onto the
// Redis address flags, with the reference's REDIS_URL forms: host:port (or
// a socket path) for SINGLE, mastername,host:port,... for SENTINEL,
// host:port,host:port for CLUSTER. A redis:// or rediss:// URL is taken as
// -redis-url.
func refRedisAddr(m *refMapping, v []string) error {
	sockType, redisType, url := v[0], v[1], v[2]
	sock, typ := strings.ToLower(sockType), strings.ToLower(redisType)
	if sock != "tcp" && sock != "unix" {
		return fmt.Errorf("REDIS_SOCKET_TYPE=%q: want tcp or unix", sockType)
	}
	if typ != "single" && typ != "sentinel" && typ != "cluster" {
		return fmt.Errorf("REDIS_TYPE=%q: want SINGLE, SENTINEL or CLUSTER", redisType)
	}
	from := []string{"REDIS_URL", "REDIS_TYPE", "REDIS_SOCKET_TYPE"}
	if !m.redis {
		for _, n := range from {
			if m.getenv(n) != "" {
				m.note(n, "not used: without REDIS_URL (or BACKEND_TYPE=redis) the counters are in memory", true)
			}
		}
		return nil
	}
	guard := []string{"redis-url", "redis-addrs", "redis-mode", "redis-master-name"}
	var addrs []string
	for a := range strings.SplitSeq(url, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	switch {
	case typ == "single" && strings.Contains(url, "://"):
		m.set(from, guard, "redis-url", url)
	case typ == "single" && sock == "unix":
		m.set(from, guard, "redis-url", "unix://"+url)
	case typ == "single":
		m.set(from, guard, "redis-addrs", url)
	case sock == "unix":
		return fmt.Errorf("REDIS_SOCKET_TYPE=unix: REDIS_TYPE=%s needs tcp addresses", redisType)
	case typ == "sentinel":
		if len(addrs) < 2 {
			return fmt.Errorf("REDIS_URL=%q: REDIS_TYPE=SENTINEL wants mastername,host:port[,host:port...]", url)
		}
		m.set(from, guard, "redis-mode", "sentinel", "redis-master-name", addrs[0], "redis-addrs", strings.Join(addrs[1:], ","))
	default:
		m.set(from, guard, "redis-mode", "cluster", "redis-addrs", strings.Join(addrs, ","))
	}
	return nil
}

// refRedisAuth maps "password" or "user:password" onto two flags.
func refRedisAuth(name, userFlag, passFlag string) func(m *refMapping, v []string) error {
	return func(m *refMapping, v []string) error {
		user, pass, ok := strings.Cut(v[0], ":")
		if !ok {
			user, pass = "", v[0]
		}
		if !m.redis {
			m.setRedis(name)
			return nil
		}
		m.set([]string{name}, []string{userFlag, passFlag}, userFlag, user, passFlag, pass)
		return nil
	}
}

// refRedisTimeout maps REDIS_TIMEOUT, the reference's Redis client timeout
// (dial and each read or write; 10s by default), and REQUEST_TIMEOUT, its
// newer deadline on a call's cache work (0, the default, for none; it never
// extends an earlier deadline), onto -redis-timeout (a call without a
// deadline) and -redis-timeout-cap (every call): started with the
// reference's Redis variables, no call waits longer than the reference's
// would, the shorter of the two, and a request with a deadline still keeps
// its margin for answering (see redisstore.Options). Without Redis they are
// only noted, when set: the in-memory store never waits.
func refRedisTimeout(m *refMapping, v []string) error {
	request, err := refNonNegativeDuration("REQUEST_TIMEOUT", v[1])
	if err != nil {
		return err
	}
	if !m.redis {
		for _, n := range []string{"REDIS_TIMEOUT", "REQUEST_TIMEOUT"} {
			if m.getenv(n) != "" {
				m.setRedis(n) // notes it as not used
			}
		}
		return nil
	}
	if _, err := refDuration("REDIS_TIMEOUT", v[0]); err != nil {
		return err
	}
	timeout, maxTimeout := v[0], v[0]
	if d, _ := time.ParseDuration(v[0]); d <= 0 {
		// The reference sets no timeout then: no cap, and a call without
		// a deadline waits the reference's default.
		timeout, maxTimeout = refDefaultRedisTimeout, "0s"
	}
	if request > 0 {
		t, _ := time.ParseDuration(timeout)
		timeout = min(t, request).String()
		if c, _ := time.ParseDuration(maxTimeout); c <= 0 || request < c {
			maxTimeout = request.String()
		}
	}
	m.set([]string{"REDIS_TIMEOUT", "REQUEST_TIMEOUT"}, nil, "redis-timeout", timeout, "redis-timeout-cap", maxTimeout)
	return nil
}

// refNonNegativeDuration reads a duration the reference refuses to start
// with when negative.
func refNonNegativeDuration(name, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q: want a duration of 0 or more, such as 500ms", name, v)
	}
	return d, nil
}

// refNonNegativeInt reads a whole number the reference refuses to start
// with when negative (MAX_CONCURRENT_REQUESTS, a panic there).
func refNonNegativeInt(name, v string) (string, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return "", fmt.Errorf("%s=%q: want a whole number, 0 or more", name, v)
	}
	return strconv.Itoa(n), nil
}

// refWarnWhenTrue checks a boolean variable of the reference and warns,
// with text, when it asks for behaviour the sidecar lacks (true); the
// variables of names, read with it, are then only noted, when set.
func refWarnWhenTrue(text string, names ...string) func(m *refMapping, v []string) error {
	return func(m *refMapping, v []string) error {
		on, err := refBool(names[0], v[0])
		if err != nil {
			return err
		}
		if on {
			m.note(names[0], "not supported: "+text, true)
		}
		for _, n := range names[1:] {
			if m.getenv(n) != "" {
				m.note(n, "not used: "+text, false)
			}
		}
		return nil
	}
}
