package envoyrls

import (
	"context"
	"errors"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window/redisstore"
)

// counterRules have descriptors with several limits of one length, and
// single limits whose keys are pinned.
const counterRules = `
domain: edge
descriptors:
  - key: twice
    rate_limits:
      - {unit: minute, requests_per_unit: 3}
      - {unit: second, unit_multiplier: 60, requests_per_unit: 100}
  - key: second_decides
    rate_limits:
      - {unit: minute, requests_per_unit: 100}
      - {unit: minute, requests_per_unit: 3, name: tight}
  - key: mixed
    rate_limits:
      - {unit: minute, requests_per_unit: 3}
      - {unit: minute, requests_per_unit: 100, algorithm: sliding_window}
  - key: sliding_first
    rate_limits:
      - {unit: minute, requests_per_unit: 3, algorithm: sliding_window}
      - {unit: minute, requests_per_unit: 100}
  - key: three
    rate_limits:
      - {unit: minute, requests_per_unit: 100}
      - {unit: minute, requests_per_unit: 3}
      - {unit: hour, requests_per_unit: 100}
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: sliding
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_window}
`

// counterStore is a store as the command composes it (behind an over-limit
// cache) and a reader of its counters, which counts nothing.
type counterStore struct {
	store window.Store
	get   func(t *testing.T, c counterAt) uint64
}

// counterAt is one counter: a key as the server builds it and a window.
type counterAt struct {
	key string
	w   window.Window
}

// memoryGet reads a counter of m with a check of no hits at its window's
// start.
func memoryGet(m *window.Memory) func(t *testing.T, c counterAt) uint64 {
	return func(t *testing.T, c counterAt) uint64 {
		t.Helper()
		res := make([]window.Result, 1)
		req := []window.Counter{{Key: c.key, Limit: 1, Size: time.Duration(c.w.Size) * time.Millisecond, Shadow: true}}
		if _, err := m.Take(context.Background(), time.UnixMilli(c.w.Start), req, res); err != nil {
			t.Fatalf("reading %q: %v", c.key, err)
		}
		return res[0].Count
	}
}

// redisGet reads a counter with GET: 0 when the key does not exist.
func redisGet(r redis.Cmdable) func(t *testing.T, c counterAt) uint64 {
	return func(t *testing.T, c counterAt) uint64 {
		t.Helper()
		key := string(window.AppendWindow([]byte(c.key), c.w))
		n, err := r.Get(context.Background(), key).Uint64()
		if errors.Is(err, redis.Nil) {
			return 0
		}
		if err != nil {
			t.Fatalf("GET %q: %v", key, err)
		}
		return n
	}
}

var counterStores = map[string]func(t *testing.T) counterStore{
	"memory": func(t *testing.T) counterStore {
		m := window.NewMemory()
		return counterStore{window.NewOverLimitCache(m), memoryGet(m)}
	},
	"redis": func(t *testing.T) counterStore {
		c := redistest.Start(t).Client(t)
		return counterStore{window.NewOverLimitCache(redisstore.New(c, redisstore.Options{})), redisGet(c)}
	},
	"cluster": func(t *testing.T) counterStore {
		c := redistest.StartCluster(t, 3).Client(t)
		return counterStore{window.NewOverLimitCache(redisstore.New(c, redisstore.Options{})), redisGet(c)}
	},
}

// TestEveryLimitHasItsOwnCounter: the limits of one descriptor count in a
// counter each, also when they have the same length or differ only in
// algorithm, so each admits exactly its own limit; and a descriptor with one
// fixed-window limit keeps the key it always had.
func TestEveryLimitHasItsOwnCounter(t *testing.T) {
	t.Parallel()
	var (
		minute = window.AtMillis(t0.UnixMilli(), 60_000)
		hour   = window.AtMillis(t0.UnixMilli(), 3_600_000)
		prev   = minute.Previous()
	)
	tests := []struct {
		name   string
		key    string
		calls  int
		admits int
		counts map[counterAt]uint64 // the counters after the calls
	}{
		{"minute and 60 s", "twice", 4, 3, map[counterAt]uint64{
			{"ratelimit:{edge|twice=x}", minute}:   3,
			{"ratelimit:{edge|twice=x}!1", minute}: 3,
		}},
		{"second limit decides", "second_decides", 5, 3, map[counterAt]uint64{
			{"ratelimit:{edge|second_decides=x}", minute}:   3,
			{"ratelimit:{edge|second_decides=x}!1", minute}: 3,
		}},
		{"fixed and sliding", "mixed", 4, 3, map[counterAt]uint64{
			{"ratelimit:{edge|mixed=x}", minute}:                  3,
			{"ratelimit:{edge|mixed=x}!1,sliding_window", minute}: 3,
			{"ratelimit:{edge|mixed=x}!1,sliding_window", prev}:   0,
		}},
		{"sliding and fixed", "sliding_first", 4, 3, map[counterAt]uint64{
			{"ratelimit:{edge|sliding_first=x}!sliding_window", minute}: 3,
			{"ratelimit:{edge|sliding_first=x}!1", minute}:              3,
			{"ratelimit:{edge|sliding_first=x}", minute}:                0,
		}},
		{"three limits", "three", 4, 3, map[counterAt]uint64{
			{"ratelimit:{edge|three=x}", minute}:   3,
			{"ratelimit:{edge|three=x}!1", minute}: 3,
			{"ratelimit:{edge|three=x}!2", hour}:   3,
		}},
		// The key of a single fixed-window limit is the one every earlier
		// version wrote, so replicas of both count together during a
		// rolling upgrade.
		{"one fixed limit keeps its key", "api_key", 4, 3, map[counterAt]uint64{
			{"ratelimit:{edge|api_key=x}", minute}: 3,
		}},
		{"one sliding limit", "sliding", 4, 3, map[counterAt]uint64{
			{"ratelimit:{edge|sliding=x}!sliding_window", minute}: 3,
			{"ratelimit:{edge|sliding=x}", minute}:                0,
		}},
	}
	// The bytes of the key every earlier version wrote for api_key=x.
	if got, want := string(window.AppendWindow([]byte("ratelimit:{edge|api_key=x}"), minute)),
		"ratelimit:{edge|api_key=x}:60000:1763800020000"; got != want {
		t.Fatalf("key = %q, want %q", got, want)
	}
	for kind, mk := range counterStores {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cs := mk(t)
			f := newFixture(t, cs.store, counterRules)
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					admitted := 0
					for range tt.calls {
						if f.call(t, "edge", desc(tt.key, "x")).OverallCode == okCode {
							admitted++
						}
					}
					if admitted != tt.admits {
						t.Errorf("%d calls admitted %d, want %d", tt.calls, admitted, tt.admits)
					}
					for c, want := range tt.counts {
						if got := cs.get(t, c); got != want {
							t.Errorf("counter %q %+v = %d, want %d", c.key, c.w, got, want)
						}
					}
				})
			}
		})
	}
}

// TestOverrideKeys pins the keys of Envoy's limit overrides: "override" in
// the hash tag, and the algorithm after it when it is not the fixed window.
func TestOverrideKeys(t *testing.T) {
	t.Parallel()
	m := window.NewMemory()
	f := newFixture(t, m, counterRules)
	minute := window.AtMillis(t0.UnixMilli(), 60_000)
	for _, tt := range []struct{ key, want string }{
		{"api_key", "ratelimit:{edge|api_key=y|!override}"},
		{"sliding", "ratelimit:{edge|sliding=y|!override}!sliding_window"},
	} {
		d := desc(tt.key, "y")
		d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MINUTE}
		if got := f.call(t, "edge", d).OverallCode; got != okCode {
			t.Fatalf("%s: code %v, want OK", tt.key, got)
		}
		if got := memoryGet(m)(t, counterAt{tt.want, minute}); got != 1 {
			t.Errorf("%s: counter %q = %d, want 1", tt.key, tt.want, got)
		}
	}
}

// TestDescriptorKeysShareAllocation: a descriptor's counter keys are one
// string whatever the number of its limits, so setKeys allocates once per
// descriptor. It drives setKeys on a call of its own, not one from the
// server's pool, so the count holds under the race detector too.
func TestDescriptorKeysShareAllocation(t *testing.T) {
	f := newFixture(t, window.NewMemory(), counterRules)
	allocs := func(d *rlv3.RateLimitDescriptor) (float64, int) {
		req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{d}}
		c := &scratch{}
		for _, l := range f.srv.Rules().Domain("edge").Match(d.Entries) {
			c.limits, c.owner = append(c.limits, l), append(c.owner, 0)
			c.slot = append(c.slot, len(c.reqs))
			c.reqs = append(c.reqs, window.Counter{})
		}
		return testing.AllocsPerRun(100, func() { f.srv.setKeys(req, c) }), len(c.reqs)
	}
	one, n1 := allocs(desc("api_key", "k"))
	three, n3 := allocs(desc("three", "k"))
	if n1 != 1 || n3 != 3 {
		t.Fatalf("matched %d and %d limits, want 1 and 3 (counterRules changed?)", n1, n3)
	}
	if one != 1 || three != 1 {
		t.Errorf("setKeys allocations: %v for one limit, %v for three, want 1 and 1", one, three)
	}
}
