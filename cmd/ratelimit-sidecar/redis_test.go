package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window/redisstore"
)

// writeCA writes a self-signed CA certificate as PEM and returns its path.
func writeCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// redisFlags parses args (plus a -config) and returns the options.
func redisFlags(t *testing.T, args []string, env map[string]string) *options {
	t.Helper()
	c, err := parseOptions("test", append([]string{"-config", "x.yaml"}, args...), func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatalf("parseOptions(%q) = %v", args, err)
	}
	return c
}

func TestRedisOptions(t *testing.T) {
	t.Parallel()
	ca := writeCA(t)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string // substring; "" for success
		check   func(t *testing.T, o *redis.UniversalOptions)
	}{
		{name: "url", args: []string{"-redis-url", "redis://u:p@127.0.0.1:6379/3"}, check: func(t *testing.T, o *redis.UniversalOptions) {
			if len(o.Addrs) != 1 || o.Addrs[0] != "127.0.0.1:6379" || o.Username != "u" || o.Password != "p" || o.DB != 3 || o.TLSConfig != nil {
				t.Errorf("options = %+v", o)
			}
			if _, ok := redis.NewUniversalClient(o).(*redis.Client); !ok {
				t.Errorf("client is not a *redis.Client")
			}
		}},
		{name: "rediss url with a CA", args: []string{"-redis-url", "rediss://redis.example:6380", "-redis-tls-ca", ca}, check: func(t *testing.T, o *redis.UniversalOptions) {
			if o.TLSConfig == nil || o.TLSConfig.RootCAs == nil || o.TLSConfig.InsecureSkipVerify {
				t.Errorf("TLSConfig = %+v, want RootCAs from the CA file", o.TLSConfig)
			}
		}},
		{name: "unix socket url", args: []string{"-redis-url", "unix:///run/redis.sock"}, check: func(t *testing.T, o *redis.UniversalOptions) {
			if o.Addrs[0] != "/run/redis.sock" || o.Dialer == nil {
				t.Errorf("Addrs = %v, Dialer set %v, want the socket and a unix dialer", o.Addrs, o.Dialer != nil)
			}
		}},
		{name: "single by address, password from the environment", args: []string{"-redis-addrs", "10.0.0.1:6379", "-redis-pool-size", "20"},
			env: map[string]string{"RLS_REDIS_PASSWORD": "s3cret"}, check: func(t *testing.T, o *redis.UniversalOptions) {
				if o.Password != "s3cret" || o.PoolSize != 20 || o.IsClusterMode || o.MasterName != "" {
					t.Errorf("options = %+v", o)
				}
			}},
		{name: "sentinel", args: []string{"-redis-mode", "sentinel", "-redis-addrs", "s1:26379, s2:26379,s3:26379", "-redis-master-name", "mymaster", "-redis-db", "2"},
			check: func(t *testing.T, o *redis.UniversalOptions) {
				if o.MasterName != "mymaster" || len(o.Addrs) != 3 || o.Addrs[1] != "s2:26379" || o.DB != 2 {
					t.Errorf("options = %+v", o)
				}
			}},
		{name: "cluster from the environment, TLS", env: map[string]string{"RLS_REDIS_MODE": "cluster", "RLS_REDIS_ADDRS": "n1:6379", "RLS_REDIS_TLS": "true"},
			check: func(t *testing.T, o *redis.UniversalOptions) {
				if !o.IsClusterMode || o.TLSConfig == nil || o.TLSConfig.ServerName != "" {
					t.Errorf("options = %+v, want cluster mode and TLS without a fixed ServerName", o)
				}
				if _, ok := redis.NewUniversalClient(o).(*redis.ClusterClient); !ok {
					t.Errorf("client is not a *redis.ClusterClient")
				}
			}},
		{name: "always no retries and context deadlines", args: []string{"-redis-addrs", "h:1"}, check: func(t *testing.T, o *redis.UniversalOptions) {
			if o.MaxRetries != -1 || !o.ContextTimeoutEnabled || o.DialerRetries != 1 || o.Protocol != 2 {
				t.Errorf("MaxRetries %d ContextTimeoutEnabled %v DialerRetries %d Protocol %d, want -1 true 1 2",
					o.MaxRetries, o.ContextTimeoutEnabled, o.DialerRetries, o.Protocol)
			}
		}},
		{name: "sentinel without master name", args: []string{"-redis-mode", "sentinel", "-redis-addrs", "s1:26379"}, wantErr: "needs -redis-master-name"},
		{name: "sentinel without addresses", args: []string{"-redis-mode", "sentinel", "-redis-master-name", "m"}, wantErr: "sentinels' addresses"},
		{name: "cluster without addresses", args: []string{"-redis-mode", "cluster"}, wantErr: "needs seed node addresses"},
		{name: "cluster with a url", args: []string{"-redis-mode", "cluster", "-redis-url", "redis://h:1"}, wantErr: "-redis-url is for -redis-mode single"},
		{name: "cluster with a db", args: []string{"-redis-mode", "cluster", "-redis-addrs", "h:1", "-redis-db", "1"}, wantErr: "only database 0"},
		{name: "master name without sentinel", args: []string{"-redis-addrs", "h:1", "-redis-master-name", "m"}, wantErr: "is for -redis-mode sentinel"},
		{name: "single with several addresses", args: []string{"-redis-addrs", "h:1,h:2"}, wantErr: "takes one address"},
		{name: "url and addresses", args: []string{"-redis-url", "redis://h:1", "-redis-addrs", "h:2"}, wantErr: "set one, not both"},
		{name: "bad mode", args: []string{"-redis-mode", "ring", "-redis-addrs", "h:1"}, wantErr: `-redis-mode "ring"`},
		{name: "address without port", args: []string{"-redis-addrs", "localhost"}, wantErr: "-redis-addrs"},
		{name: "bad url", args: []string{"-redis-url", "http://h:1"}, wantErr: "-redis-url"},
		{name: "credentials twice", args: []string{"-redis-url", "redis://u:p@h:1", "-redis-password", "q"}, wantErr: "carries credentials"},
		{name: "CA without TLS", args: []string{"-redis-addrs", "h:1", "-redis-tls-ca", ca}, wantErr: "need -redis-tls"},
		{name: "CA file missing", args: []string{"-redis-addrs", "h:1", "-redis-tls", "-redis-tls-ca", "/nonexistent/ca.pem"}, wantErr: "-redis-tls-ca"},
		{name: "CA file not PEM", args: []string{"-redis-addrs", "h:1", "-redis-tls", "-redis-tls-ca", notPEM}, wantErr: "no PEM certificate"},
		{name: "negative pool size", args: []string{"-redis-addrs", "h:1", "-redis-pool-size", "-1"}, wantErr: "-redis-pool-size"},
		{name: "negative batch linger", args: []string{"-redis-addrs", "h:1", "-redis-batch-linger", "-1ms"}, wantErr: "-redis-batch-linger"},
		{name: "negative timeout cap", args: []string{"-redis-addrs", "h:1", "-redis-timeout-cap", "-1ms"}, wantErr: "-redis-timeout-cap -1ms: want 0 (none) or more"},
		{name: "batch linger past half the timeout", args: []string{"-redis-addrs", "h:1", "-redis-timeout", "5ms", "-redis-batch-linger", "3ms"}, wantErr: "half of -redis-timeout"},
		{name: "batch linger unbatched", args: []string{"-redis-addrs", "h:1", "-redis-batch-workers", "0", "-redis-batch-linger", "1ms"}, wantErr: "needs batching"},
		{name: "zero batch spacing", args: []string{"-redis-addrs", "h:1", "-redis-batch-spacing", "0s"}, wantErr: "-redis-batch-spacing"},
		{name: "batch linger on a cluster", args: []string{"-redis-mode", "cluster", "-redis-addrs", "h:1", "-redis-batch-linger", "1ms"},
			check: func(t *testing.T, o *redis.UniversalOptions) {
				if !o.IsClusterMode {
					t.Errorf("options = %+v, want cluster mode (batched, so a linger is allowed)", o)
				}
			}},
		{name: "breaker open for zero", args: []string{"-redis-addrs", "h:1", "-redis-breaker-open-for", "0s"}, wantErr: "-redis-breaker-open-for"},
		{name: "sentinel credentials", args: []string{"-redis-mode", "sentinel", "-redis-addrs", "s1:1", "-redis-master-name", "m", "-redis-sentinel-username", "su", "-redis-sentinel-password", "sp"},
			check: func(t *testing.T, o *redis.UniversalOptions) {
				if o.SentinelUsername != "su" || o.SentinelPassword != "sp" {
					t.Errorf("Sentinel credentials %q %q, want su sp", o.SentinelUsername, o.SentinelPassword)
				}
			}},
		{name: "skip hostname verification", args: []string{"-redis-addrs", "h:1", "-redis-tls", "-redis-tls-ca", ca, "-redis-tls-skip-hostname-verification"},
			check: func(t *testing.T, o *redis.UniversalOptions) {
				if o.TLSConfig == nil || !o.TLSConfig.InsecureSkipVerify || o.TLSConfig.VerifyConnection == nil {
					t.Errorf("TLSConfig = %+v, want the chain checked by VerifyConnection", o.TLSConfig)
				}
			}},
		{name: "sentinel credentials without sentinel", args: []string{"-redis-addrs", "h:1", "-redis-sentinel-password", "p"}, wantErr: "are for -redis-mode sentinel"},
		{name: "client cert without key", args: []string{"-redis-addrs", "h:1", "-redis-tls", "-redis-tls-cert", ca}, wantErr: "go together"},
		{name: "client cert not a key pair", args: []string{"-redis-addrs", "h:1", "-redis-tls", "-redis-tls-cert", ca, "-redis-tls-key", notPEM}, wantErr: "-redis-tls-cert, -redis-tls-key"},
		{name: "skip hostname without TLS", args: []string{"-redis-addrs", "h:1", "-redis-tls-skip-hostname-verification"}, wantErr: "need -redis-tls"},
		{name: "every problem at once", args: []string{"-redis-mode", "sentinel", "-redis-pool-size", "-1"}, wantErr: "-redis-pool-size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := redisFlags(t, tt.args, tt.env)
			if !c.usesRedis() {
				t.Fatalf("usesRedis() = false for %q", tt.args)
			}
			o, err := redisOptions(c)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("redisOptions(%q) = %v, want an error containing %q", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("redisOptions(%q) = %v", tt.args, err)
			}
			tt.check(t, o)
		})
	}
}

func TestUsesRedis(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		env  map[string]string
	}{
		{nil, nil},
		{[]string{"-redis-url", ""}, nil}, // how bench/harness asks for memory
		{[]string{"-over-limit-cache=false", "-clock-sync-interval", "0"}, nil},
		{nil, map[string]string{"RLS_REDIS_URL": ""}},
	} {
		if c := redisFlags(t, tt.args, tt.env); c.usesRedis() {
			t.Errorf("usesRedis() with %q %v = true (%v), want false (in-memory store)", tt.args, tt.env, c.redisGiven)
		}
	}
	// A Redis flag without an address is a mistake to report, not a
	// reason to count in memory, even when it repeats the default.
	for _, tt := range []struct {
		args []string
		env  map[string]string
		flag string
	}{
		{nil, map[string]string{"RLS_REDIS_PASSWORD": "x"}, "-redis-password"},
		{[]string{"-redis-timeout", "15ms"}, nil, "-redis-timeout"},
		{nil, map[string]string{"RLS_REDIS_TIMEOUT": "5ms"}, "-redis-timeout"},
		{[]string{"-redis-pool-size", "20"}, nil, "-redis-pool-size"},
		{[]string{"-redis-batch-workers", "0"}, nil, "-redis-batch-workers"},
		{[]string{"-redis-batch-linger", "200us"}, nil, "-redis-batch-linger"},
		{[]string{"-redis-breaker-failures", "0"}, nil, "-redis-breaker-failures"},
		{[]string{"-redis-breaker-open-for", "2s"}, nil, "-redis-breaker-open-for"},
		{[]string{"-redis-url", "", "-redis-tls=false"}, nil, "-redis-tls"},
	} {
		c := redisFlags(t, tt.args, tt.env)
		if !c.usesRedis() {
			t.Errorf("usesRedis() with %q %v = false, want true", tt.args, tt.env)
			continue
		}
		if _, err := redisOptions(c); err == nil || !strings.Contains(err.Error(), "set -redis-url or -redis-addrs") || !strings.Contains(err.Error(), tt.flag) {
			t.Errorf("redisOptions with %q %v = %v, want an error asking for an address and naming %s", tt.args, tt.env, err, tt.flag)
		}
	}
}

// TestRedisStoreOverCluster: the flags build a client and a batched store
// that count across the slots of a real cluster, behind the breaker.
func TestRedisStoreOverCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	// A generous -redis-timeout: this test is about counts, and the first
	// calls to a new cluster (slot discovery, redirections) under -race on a
	// shared machine can take longer than the 15 ms default.
	c := redisFlags(t, []string{"-redis-mode", "cluster", "-redis-addrs", strings.Join(cl.Addrs[:1], ","), "-redis-timeout", "5s"}, nil)
	client, err := newRedisClient(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	store := newRedisStore(c, client, zaptest.NewLogger(t), nil)
	t.Cleanup(func() { store.Close() })
	if !store.batched || store.breaker == nil {
		t.Errorf("cluster store: batched %v, breaker %v; want batched with a breaker", store.batched, store.breaker)
	}
	ctx := context.Background()
	if err := store.Store.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(1_763_800_020_000)
	var reqs []window.Counter
	for _, d := range []string{"a", "b", "c", "d"} {
		key := window.AppendKeyEnd(window.AppendKeyEntry(window.AppendKeyHead(nil, "rl", "edge"), "k", d))
		reqs = append(reqs, window.Counter{Key: string(key), Limit: 2, Size: time.Minute, Hits: 1})
	}
	for i, want := range []bool{true, true, false} {
		ok, err := store.Store.Take(ctx, now, reqs, make([]window.Result, len(reqs)))
		if err != nil || ok != want {
			t.Errorf("Take %d = %v, %v, want %v, nil", i, ok, err, want)
		}
	}
}

// TestRedisStoreLayers: on a single node the flags put the over-limit cache
// and the breaker around a batched store, and each flag turns its layer off.
func TestRedisStoreLayers(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, tt := range []struct {
		args                     []string
		batcher, breaker, cached bool
	}{
		{nil, true, true, true},
		{[]string{"-redis-batch-workers", "0", "-redis-breaker-failures", "0", "-over-limit-cache=false"}, false, false, false},
	} {
		// -redis-timeout as in TestRedisStoreOverCluster: counts, not latency.
		c := redisFlags(t, append([]string{"-redis-url", srv.URL(), "-redis-timeout", "5s"}, tt.args...), nil)
		client, err := newRedisClient(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.Close() })
		store := newRedisStore(c, client, zaptest.NewLogger(t), nil)
		t.Cleanup(func() { store.Close() })
		_, cached := store.Store.(*window.OverLimitCache)
		if store.batched != tt.batcher || (store.breaker != nil) != tt.breaker || cached != tt.cached {
			t.Errorf("%q: batcher %v breaker %v cache %v, want %v %v %v", tt.args, store.batched, store.breaker != nil, cached, tt.batcher, tt.breaker, tt.cached)
		}
		ctx := context.Background()
		if err := store.Store.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		key := string(window.AppendKeyEnd(window.AppendKeyEntry(window.AppendKeyHead(nil, "rl", "edge"), "k", strings.Join(tt.args, ""))))
		r := []window.Counter{{Key: key, Limit: 1, Size: time.Minute, Hits: 1}}
		before := store.RoundTrips()
		for i, want := range []bool{true, false, false} {
			ok, err := store.Store.Take(ctx, time.UnixMilli(1_763_800_020_000), r, make([]window.Result, 1))
			if err != nil || ok != want {
				t.Errorf("%q Take %d = %v, %v, want %v", tt.args, i, ok, err, want)
			}
		}
		// The first call fills the counter, so with the cache the other two
		// never reach Redis.
		want := uint64(3)
		if tt.cached {
			want = 1
		}
		if got := store.RoundTrips() - before; got != want {
			t.Errorf("%q: %d round trips for 3 calls, want %d", tt.args, got, want)
		}
	}
}

// TestBatchOptions: the batch flags reach the batched store's options.
func TestBatchOptions(t *testing.T) {
	t.Parallel()
	c := redisFlags(t, []string{"-redis-addrs", "h:1", "-redis-batch-workers", "2", "-redis-batch-spacing", "3ms", "-redis-batch-linger", "200us"}, nil)
	if _, err := redisOptions(c); err != nil {
		t.Fatal(err)
	}
	if got, want := c.redis.batchOptions(), (redisstore.BatchOptions{Workers: 2, Spacing: 3 * time.Millisecond, Linger: 200 * time.Microsecond}); got != want {
		t.Errorf("batchOptions() = %+v, want %+v", got, want)
	}
}

// TestPoolStatsOf: go-redis's pool counters reach the metrics as they are.
func TestPoolStatsOf(t *testing.T) {
	t.Parallel()
	if got := poolStatsOf(nil); got != nil {
		t.Errorf("poolStatsOf(nil) = %+v, want nil", got)
	}
	got := poolStatsOf(&redis.PoolStats{Hits: 10, Misses: 2, Timeouts: 1, TotalConns: 5, IdleConns: 3, StaleConns: 4, WaitCount: 9})
	want := metrics.PoolStats{Hits: 10, Misses: 2, Timeouts: 1, TotalConns: 5, IdleConns: 3, StaleConns: 4}
	if got == nil || *got != want {
		t.Errorf("poolStatsOf = %+v, want %+v", got, want)
	}
}

// TestRedisDialTimeout: ten times -redis-timeout, at least a second, and no
// more than -redis-timeout-cap when that is over a second, so the
// reference's REDIS_TIMEOUT (both at 10s) bounds dials as it does there.
func TestRedisDialTimeout(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		timeout, maxTimeout, want time.Duration
	}{
		{15 * time.Millisecond, 0, time.Second},
		{15 * time.Millisecond, 15 * time.Millisecond, time.Second},
		{500 * time.Millisecond, 0, 5 * time.Second},
		{500 * time.Millisecond, 2 * time.Second, 2 * time.Second},
		{10 * time.Second, 10 * time.Second, 10 * time.Second},
	} {
		var o redis.UniversalOptions
		setRedisConnection(&o, tt.timeout, tt.maxTimeout)
		if o.DialTimeout != tt.want {
			t.Errorf("setRedisConnection(%v, %v): DialTimeout = %v, want %v", tt.timeout, tt.maxTimeout, o.DialTimeout, tt.want)
		}
	}
}
