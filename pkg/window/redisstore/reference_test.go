package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// refModel counts as envoyproxy/ratelimit's fixed_cache_impl.go (f2fb157)
// does with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true and no local
// cache: GET every key; when some key's count plus its hits passes its
// limit, only those keys take their hits (the others INCRBY 0); else all
// do. A key is over when its count after passes its limit. It returns the
// overall answer and each key's count after.
func refModel(counts map[string]uint64, keys []string, limits, hits []uint64) (bool, []uint64) {
	near := make([]bool, len(keys))
	anyNear := false
	for i, k := range keys {
		if counts[k]+hits[i] > limits[i] {
			near[i], anyNear = true, true
		}
	}
	allowed, after := true, make([]uint64, len(keys))
	for i, k := range keys {
		if !anyNear || near[i] {
			counts[k] += hits[i]
		}
		after[i] = counts[k]
		if after[i] > limits[i] {
			allowed = false
		}
	}
	return allowed, after
}

func TestReferenceCountingMatchesReference(t *testing.T) {
	t.Parallel()
	type step struct {
		keys   []int // indexes into the counters below
		hits   []uint64
		denied bool
	}
	counters := []struct {
		entry string
		limit uint64
	}{{"a", 3}, {"b", 10}}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"unit hits to the limit and past it", []step{
			{keys: []int{0}, hits: []uint64{1}}, {keys: []int{0}, hits: []uint64{1}}, {keys: []int{0}, hits: []uint64{1}},
			{keys: []int{0}, hits: []uint64{1}, denied: true}, {keys: []int{0}, hits: []uint64{1}, denied: true},
		}},
		{"a check at the limit passes, past it is denied", []step{
			{keys: []int{0}, hits: []uint64{3}}, {keys: []int{0}, hits: []uint64{0}},
			{keys: []int{0}, hits: []uint64{1}, denied: true}, {keys: []int{0}, hits: []uint64{0}, denied: true},
		}},
		{"a denied large request still counts on its own counter", []step{
			{keys: []int{0}, hits: []uint64{2}}, {keys: []int{0}, hits: []uint64{2}, denied: true},
			{keys: []int{0}, hits: []uint64{0}, denied: true},
		}},
		{"two counters: only the one without room counts on denial", []step{
			{keys: []int{0, 1}, hits: []uint64{2, 2}}, {keys: []int{0, 1}, hits: []uint64{2, 2}, denied: true},
			{keys: []int{1}, hits: []uint64{6}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			client := srv.Client(t)
			s := New(client, Options{})
			ctx := context.Background()
			model := map[string]uint64{}
			start := strconv.FormatInt(window.At(storetest.T0, time.Minute).Start/1000, 10)
			for n, st := range tc.steps {
				reqs := make([]window.Counter, len(st.keys))
				keys := make([]string, len(st.keys))
				limits := make([]uint64, len(st.keys))
				for j, c := range st.keys {
					head := window.AppendReferenceEntry(window.AppendReferenceKey(nil, "p:", "edge"), "k", counters[c].entry)
					reqs[j] = window.Counter{Key: string(head), Limit: counters[c].limit, Size: time.Minute, Hits: st.hits[j],
						Reference: true, Jitter: 5 * time.Second}
					keys[j], limits[j] = "p:edge_k_"+counters[c].entry+"_"+start, counters[c].limit
				}
				res := make([]window.Result, len(reqs))
				allowed, err := s.Take(ctx, storetest.T0, reqs, res)
				if err != nil {
					t.Fatalf("step %d: Take: %v", n, err)
				}
				wantAllowed, after := refModel(model, keys, limits, st.hits)
				if allowed != wantAllowed || allowed == st.denied {
					t.Fatalf("step %d: Take = %v, want %v (model %v)", n, allowed, !st.denied, wantAllowed)
				}
				for j, k := range keys {
					v, err := client.Get(ctx, k).Uint64()
					if err != nil || v != after[j] || res[j].Count != after[j] {
						t.Errorf("step %d: GET %s = %d, %v, Count %d; want %d", n, k, v, err, res[j].Count, after[j])
					}
					// EXPIRE on every decision: the window plus the jitter.
					if ttl := client.TTL(ctx, k).Val(); ttl != 65*time.Second {
						t.Errorf("step %d: TTL %s = %v, want 65s", n, k, ttl)
					}
				}
			}
		})
	}
}

// TestReferenceKeyLayout pins the key text to envoyproxy/ratelimit's
// cache_key.go: prefix, domain, '_', each entry's key and value each
// followed by '_', then the window's start in Unix seconds.
func TestReferenceKeyLayout(t *testing.T) {
	t.Parallel()
	head := window.AppendReferenceKey(nil, "", "rl")
	head = window.AppendReferenceEntry(head, "foo", "pelle")
	head = window.AppendReferenceEntry(head, "baz", "not-so-shady")
	for _, tc := range []struct {
		size time.Duration
		want string
	}{
		{time.Second, "rl_foo_pelle_baz_not-so-shady_" + strconv.FormatInt(storetest.T0.Unix(), 10)},
		{time.Hour, "rl_foo_pelle_baz_not-so-shady_" + strconv.FormatInt(storetest.T0.Unix()/3600*3600, 10)},
		{7 * 24 * time.Hour, "rl_foo_pelle_baz_not-so-shady_" + strconv.FormatInt(storetest.T0.Unix()/604800*604800, 10)},
	} {
		r := window.Counter{Key: string(head), Size: tc.size, Reference: true}
		if got := string(r.AppendStoreKey(nil, storetest.T0.UnixMilli())); got != tc.want {
			t.Errorf("AppendStoreKey(%v) = %q, want %q", tc.size, got, tc.want)
		}
	}
}
