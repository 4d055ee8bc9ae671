//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
)

// TestMigrationSharesCounters is a rolling update from envoyproxy/ratelimit
// caught in the middle: the reference (at STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true)
// and the sidecar (-reference-keys) serve one redis-server with one rules
// file, and requests alternate between them. Across both, exactly the
// limit passes per window, and the counter is the reference's key, holding
// what the reference would hold had it served every request alone.
//
// The reference reads its own clock, which the test cannot inject, so the
// rules use hour windows and an attempt that straddles a boundary is run
// again with fresh keys.
func TestMigrationSharesCounters(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rules := filepath.Join(repoRoot, "test", "e2e", "testdata", "migration.yaml")
	ref := startReference(t, "reference", rules,
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+srv.Addr, "CACHE_KEY_PREFIX=mig:", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true",
		"EXPIRATION_JITTER_MAX_SECONDS=60")
	side := startSidecar(t, "sidecar", sidecarOptions{
		Bin: sidecarBin, Rules: rules, RedisURL: srv.URL(), RedisTimeout: time.Second,
		// Without the over-limit cache, as the reference runs without its
		// local cache by default: a counter known full is then written at
		// each denial, as the reference writes it, so the counts below are
		// exact. (With either cache, denials skip Redis; the answers are
		// the same.)
		Args: []string{"-reference-keys", "-reference-key-prefix", "mig:", "-reference-key-jitter", "60s", "-over-limit-cache=false"},
	})
	if !strings.Contains(side.Output(), "-reference-keys: fixed-window limits of one unit") {
		t.Errorf("sidecar did not log which limits -reference-keys covers")
	}
	rc, sc := rlsClient(t, ref.GRPCAddr), rlsClient(t, side.GRPCAddr)
	redis := srv.Client(t)
	ctx := context.Background()

	tests := []struct {
		name  string
		limit uint64 // the rules' requests_per_unit for key
		hits  uint64 // each request's hits_addend
		calls int
	}{
		{"unit hits", 5, 1, 12},
		{"three hits a request", 10, 3, 8},
	}
	for _, tc := range tests {
		for attempt := 0; ; attempt++ {
			val := fmt.Sprintf("%s-%d-%d", tc.name[:4], time.Now().UnixNano(), attempt)
			before := time.Now().Unix() / 3600
			passed, codes := 0, ""
			for i := range tc.calls {
				c, who := rc, "R"
				if i%2 == 1 {
					c, who = sc, "S"
				}
				resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
					Domain: "migration", HitsAddend: uint32(tc.hits),
					Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{
						{Key: "tier", Value: "limit" + strconv.FormatUint(tc.limit, 10)}, {Key: "user", Value: val}}}},
				})
				if err != nil {
					t.Fatalf("%s: call %d to %s: %v", tc.name, i, who, err)
				}
				if resp.OverallCode == rlsv3.RateLimitResponse_OK {
					passed++
					codes += who + "ok "
				} else {
					codes += who + "over "
				}
			}
			after := time.Now().Unix() / 3600
			if before != after && attempt == 0 {
				continue // an hour boundary fell in the attempt: once more, in the new window
			}
			if want := int(tc.limit / tc.hits); passed != want {
				t.Errorf("%s: %d of %d calls passed across both servers (%s), want %d", tc.name, passed, tc.calls, codes, want)
			}
			// With STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true a denied
			// request still counts on the counter that has no room: every
			// call here added its hits.
			key := fmt.Sprintf("mig:migration_tier_limit%d_user_%s_%d", tc.limit, val, after*3600)
			if got, err := redis.Get(ctx, key).Uint64(); err != nil || got != uint64(tc.calls)*tc.hits {
				t.Errorf("%s: GET %s = %d, %v, want %d", tc.name, key, got, err, uint64(tc.calls)*tc.hits)
			}
			if ttl := redis.TTL(ctx, key).Val(); ttl <= 3540*time.Second || ttl > 3660*time.Second {
				t.Errorf("%s: TTL %s = %v, want the hour (less the seconds the calls took) plus up to 60s of jitter", tc.name, key, ttl)
			}
			break
		}
	}
}

// rlsClient dials a rate limit service on addr, closed when t ends.
func rlsClient(t *testing.T, addr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}
