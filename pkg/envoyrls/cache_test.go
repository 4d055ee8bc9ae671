package envoyrls

import (
	"context"
	"maps"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window/redisstore"
)

// TestCachedDenialTruthful: a request that the over-limit cache denies
// because one descriptor is full gets, for its other descriptors, the
// statuses a store without the cache gives the same request (their real
// remaining and reset, OK), in one store call that counts nothing; a denial
// of the full descriptor alone makes no store call.
func TestCachedDenialTruthful(t *testing.T) {
	t.Parallel()
	full := desc("api_key", "c") // 3 a minute
	tests := []struct {
		name  string
		prior []*rlv3.RateLimitDescriptor // each sent alone once, before full fills
		ds    []*rlv3.RateLimitDescriptor // the denied request
		over  []bool                      // per status: OVER_LIMIT
	}{
		{"2 descriptors",
			[]*rlv3.RateLimitDescriptor{desc("remote_address", "1.1.1.1")},
			[]*rlv3.RateLimitDescriptor{desc("remote_address", "1.1.1.1"), full},
			[]bool{false, true}},
		{"3 descriptors",
			[]*rlv3.RateLimitDescriptor{desc("remote_address", "1.1.1.1"), desc("api_key", "d", "path", "/x")},
			[]*rlv3.RateLimitDescriptor{desc("remote_address", "1.1.1.1"), full, desc("api_key", "d", "path", "/x")},
			[]bool{false, true, false}},
		{"3 descriptors, several limits and a sliding window",
			[]*rlv3.RateLimitDescriptor{desc("multi", "m"), desc("sliding", "s")},
			[]*rlv3.RateLimitDescriptor{desc("multi", "m"), desc("sliding", "s"), full},
			[]bool{false, false, true}},
	}
	type kind struct {
		store func(t *testing.T) window.Store
		// keys returns every counter in the store and its value, or nil
		// when the store cannot be listed.
		keys func(t *testing.T) map[string]string
	}
	kinds := map[string]func(t *testing.T) kind{
		"memory": func(t *testing.T) kind {
			return kind{store: func(*testing.T) window.Store { return window.NewMemory() }, keys: func(*testing.T) map[string]string { return nil }}
		},
		"redis": func(t *testing.T) kind {
			client := redistest.Start(t).Client(t)
			return kind{
				store: func(*testing.T) window.Store { return redisstore.New(client, redisstore.Options{}) },
				keys: func(t *testing.T) map[string]string {
					ctx := context.Background()
					ks, err := client.Keys(ctx, "*").Result()
					if err != nil {
						t.Fatal(err)
					}
					out := make(map[string]string)
					for _, k := range ks {
						out[k] = client.Get(ctx, k).Val()
					}
					return out
				},
			}
		},
	}
	for name, newKind := range kinds {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					k := newKind(t) // a Redis per case, so counts start at zero
					inner := &takeCounter{Store: k.store(t)}
					cached := newFixture(t, window.NewOverLimitCache(inner), testRules)
					fresh := newFixture(t, k.store(t), testRules, func(o *Options) { o.KeyPrefix = "fresh" })
					for _, f := range []*fixture{cached, fresh} {
						f.advance(-time.Minute) // the sliding counter's previous window
						for _, d := range tt.prior {
							f.call(t, "api", d)
						}
						f.advance(time.Minute)
						for _, d := range tt.prior {
							f.call(t, "api", d)
						}
						for range 3 {
							f.call(t, "api", full)
						}
					}
					before, keys := inner.calls.Load(), k.keys(t)
					got := cached.call(t, "api", tt.ds...)
					if calls := inner.calls.Load() - before; calls != 1 {
						t.Errorf("cached denial of %d descriptors made %d store calls, want 1", len(tt.ds), calls)
					}
					if after := k.keys(t); !maps.Equal(after, keys) {
						t.Errorf("counters after the cached denial = %v, want %v (unchanged)", after, keys)
					}
					want := fresh.call(t, "api", tt.ds...)
					if got.OverallCode != overCode {
						t.Errorf("overall = %v, want OVER_LIMIT", got.OverallCode)
					}
					for i, st := range got.Statuses {
						if code := st.Code == overCode; code != tt.over[i] {
							t.Errorf("status %d = %v, want OVER_LIMIT %v", i, st.Code, tt.over[i])
						}
						if st.CurrentLimit == nil || st.DurationUntilReset == nil || !tt.over[i] && st.LimitRemaining == 0 {
							t.Errorf("status %d = %v, want a limit, a reset and, with room, remaining > 0", i, st)
						}
					}
					if !proto.Equal(got, want) {
						t.Errorf("cached denial = %v\nwant the store's %v", got, want)
					}
					// Nothing was counted: the next single requests see what
					// a store that never had the cache sees.
					for _, d := range tt.ds {
						if g, w := cached.call(t, "api", d), fresh.call(t, "api", d); !proto.Equal(g, w) {
							t.Errorf("after the denial, %v alone = %v, want %v", d, g, w)
						}
					}
					before = inner.calls.Load()
					if resp := cached.call(t, "api", full); resp.OverallCode != overCode || inner.calls.Load() != before {
						t.Errorf("full descriptor alone: %v after %d store calls, want OVER_LIMIT from the cache", resp.OverallCode, inner.calls.Load()-before)
					}
				})
			}
		})
	}
}
