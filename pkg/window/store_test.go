package window_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/storetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window/redisstore"
)

// stores returns a constructor per store kind. Every Redis test gets its own
// redis-server.
func stores() map[string]func(t *testing.T) window.Store {
	return map[string]func(t *testing.T) window.Store{
		"memory": func(t *testing.T) window.Store { return window.NewMemory() },
		"redis": func(t *testing.T) window.Store {
			srv := redistest.Start(t)
			s := redisstore.New(srv.Client(t), redisstore.Options{})
			if err := s.Ping(context.Background()); err != nil {
				t.Fatalf("Ping: %v", err)
			}
			return s
		},
		// The command's default: the same script, several Takes per call.
		"redis-batched": func(t *testing.T) window.Store {
			srv := redistest.Start(t)
			s, err := redisstore.NewBatched(srv.Client(t), redisstore.Options{}, redisstore.BatchOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			if err := s.Ping(context.Background()); err != nil {
				t.Fatalf("Ping: %v", err)
			}
			return s
		},
		"cluster": func(t *testing.T) window.Store {
			c := redistest.StartCluster(t, 3)
			s := redisstore.New(c.Client(t), redisstore.Options{})
			if err := s.Ping(context.Background()); err != nil {
				t.Fatalf("Ping: %v", err)
			}
			return s
		},
	}
}

// TestStoreSemantics is the semantic suite both stores must pass alike.
func TestStoreSemantics(t *testing.T) {
	t.Parallel()
	type step struct {
		at        time.Duration // after storetest.T0
		reqs      []window.Counter
		allowed   bool
		counts    []uint64
		over      []bool
		remaining []uint64 // optional
	}
	sliding := func(r window.Counter) window.Counter { r.Algorithm = window.SlidingWindow; return r }
	shadow := func(r window.Counter) window.Counter { r.Shadow = true; return r }
	refund := func(r window.Counter) window.Counter { r.Refund = true; return r }
	charge := func(r window.Counter) window.Counter { r.Charge = true; return r }
	tests := []struct {
		name  string
		steps []step
	}{
		{"admits exactly the limit", []step{
			{0, []window.Counter{storetest.Req("a", 2, 1)}, true, []uint64{1}, []bool{false}, []uint64{1}},
			{time.Second, []window.Counter{storetest.Req("a", 2, 1)}, true, []uint64{2}, []bool{false}, []uint64{0}},
			{2 * time.Second, []window.Counter{storetest.Req("a", 2, 1)}, false, []uint64{2}, []bool{true}, []uint64{0}},
			{3 * time.Second, []window.Counter{storetest.Req("a", 2, 1)}, false, []uint64{2}, []bool{true}, nil},
		}},
		{"a denied request consumes no quota of its other counters", []step{
			{0, []window.Counter{storetest.Req("full", 1, 1)}, true, []uint64{1}, []bool{false}, nil},
			{0, []window.Counter{storetest.Req("other", 5, 1), storetest.Req("full", 1, 1)}, false, []uint64{0, 1}, []bool{false, true}, nil},
			{0, []window.Counter{storetest.Req("other", 5, 1)}, true, []uint64{1}, []bool{false}, []uint64{4}},
		}},
		{"hits above one and hits that do not fit", []step{
			{0, []window.Counter{storetest.Req("h", 10, 7)}, true, []uint64{7}, []bool{false}, nil},
			{0, []window.Counter{storetest.Req("h", 10, 4)}, false, []uint64{7}, []bool{true}, nil},
			{0, []window.Counter{storetest.Req("h", 10, 3)}, true, []uint64{10}, []bool{false}, nil},
		}},
		// A fixed window's check is over only past the limit, as
		// envoyproxy/ratelimit decides it; a sliding window's when no hit fits.
		{"zero hits checks without counting", []step{
			{0, []window.Counter{storetest.Req("z", 1, 0)}, true, []uint64{0}, []bool{false}, nil},
			{0, []window.Counter{storetest.Req("z", 1, 1)}, true, []uint64{1}, []bool{false}, nil},
			{0, []window.Counter{storetest.Req("z", 1, 0)}, true, []uint64{1}, []bool{false}, nil},
			{0, []window.Counter{charge(storetest.Req("z", 1, 1))}, false, []uint64{2}, []bool{true}, nil},
			{0, []window.Counter{storetest.Req("z", 1, 0)}, false, []uint64{2}, []bool{true}, nil},
			{0, []window.Counter{sliding(storetest.Req("zs", 1, 1))}, true, []uint64{1}, []bool{false}, nil},
			{0, []window.Counter{sliding(storetest.Req("zs", 1, 0))}, false, []uint64{1}, []bool{true}, nil},
		}},
		{"limit zero denies everything", []step{
			{0, []window.Counter{storetest.Req("zero", 0, 1)}, false, []uint64{0}, []bool{true}, nil},
		}},
		{"shadow counts but never denies", []step{
			{0, []window.Counter{shadow(storetest.Req("s", 1, 1))}, true, []uint64{1}, []bool{false}, nil},
			{0, []window.Counter{shadow(storetest.Req("s", 1, 1)), storetest.Req("t", 5, 1)}, true, []uint64{2, 1}, []bool{true, false}, nil},
		}},
		{"refund gives hits back, floored at zero", []step{
			{0, []window.Counter{storetest.Req("r", 3, 3)}, true, []uint64{3}, []bool{false}, nil},
			{0, []window.Counter{refund(storetest.Req("r", 3, 2))}, true, []uint64{1}, []bool{false}, nil},
			{0, []window.Counter{refund(storetest.Req("r", 3, 5))}, true, []uint64{0}, []bool{false}, nil},
			{0, []window.Counter{refund(storetest.Req("never", 3, 5))}, true, []uint64{0}, []bool{false}, nil},
		}},
		{"the same counter twice in one request", []step{
			{0, []window.Counter{storetest.Req("dup", 3, 2), storetest.Req("dup", 3, 2)}, false, []uint64{0, 0}, []bool{false, true}, nil},
			{0, []window.Counter{storetest.Req("dup", 4, 2), storetest.Req("dup", 4, 2)}, true, []uint64{2, 4}, []bool{false, false}, nil},
		}},
		{"a new window starts from zero", []step{
			{59 * time.Second, []window.Counter{storetest.Req("w", 1, 1)}, true, []uint64{1}, []bool{false}, nil},
			{59*time.Second + 999*time.Millisecond, []window.Counter{storetest.Req("w", 1, 1)}, false, []uint64{1}, []bool{true}, nil},
			{time.Minute, []window.Counter{storetest.Req("w", 1, 1)}, true, []uint64{1}, []bool{false}, nil},
		}},
		{"different window sizes count apart", []step{
			{0, []window.Counter{storetest.Req("sz", 1, 1)}, true, []uint64{1}, []bool{false}, nil},
			{0, []window.Counter{{Key: "test:{sz}", Limit: 1, Size: time.Hour, Hits: 1}}, true, []uint64{1}, []bool{false}, nil},
		}},
		// A budget of 1000 tokens with responses of 600: the second charge
		// does not fit and is counted all the same; checks then deny.
		{"a charge that does not fit is counted", []step{
			{0, []window.Counter{storetest.Req("c", 1000, 0)}, true, []uint64{0}, []bool{false}, []uint64{1000}},
			{0, []window.Counter{charge(storetest.Req("c", 1000, 600))}, true, []uint64{600}, []bool{false}, []uint64{400}},
			{0, []window.Counter{storetest.Req("c", 1000, 0)}, true, []uint64{600}, []bool{false}, []uint64{400}},
			{0, []window.Counter{charge(storetest.Req("c", 1000, 600))}, false, []uint64{1200}, []bool{true}, []uint64{0}},
			{0, []window.Counter{storetest.Req("c", 1000, 0)}, false, []uint64{1200}, []bool{true}, []uint64{0}},
			{0, []window.Counter{charge(storetest.Req("c", 1000, 1))}, false, []uint64{1201}, []bool{true}, []uint64{0}},
			{0, []window.Counter{storetest.Req("c", 1000, 1)}, false, []uint64{1201}, []bool{true}, []uint64{0}},
			{time.Minute, []window.Counter{storetest.Req("c", 1000, 0)}, true, []uint64{0}, []bool{false}, []uint64{1000}},
		}},
		// Admission counters stay all or nothing; charges count whatever
		// the answer, whichever counter denied, on one slot or several.
		{"a denied request counts its charges alone", []step{
			{0, []window.Counter{charge(storetest.Req("budget", 10, 8)), storetest.Req("rate", 2, 1)}, true, []uint64{8, 1}, []bool{false, false}, nil},
			{0, []window.Counter{charge(storetest.Req("budget", 10, 8)), storetest.Req("rate", 2, 1)}, false, []uint64{16, 1}, []bool{true, false}, nil},
			{0, []window.Counter{storetest.Req("rate", 2, 1)}, true, []uint64{2}, []bool{false}, nil},
			{0, []window.Counter{storetest.Req("other", 5, 1), charge(storetest.Req("budget2", 100, 5)), storetest.Req("rate", 2, 1)}, false, []uint64{0, 5, 2}, []bool{false, false, true}, nil},
			{0, []window.Counter{storetest.Req("other", 5, 0), storetest.Req("budget2", 100, 0)}, true, []uint64{0, 5}, []bool{false, false}, nil},
		}},
		{"a charge on the same counter twice counts both", []step{
			{0, []window.Counter{charge(storetest.Req("dup", 3, 2)), charge(storetest.Req("dup", 3, 2))}, false, []uint64{2, 4}, []bool{false, true}, nil},
		}},
		{"a shadow charge counts and never denies", []step{
			{0, []window.Counter{shadow(charge(storetest.Req("sc", 1, 5)))}, true, []uint64{5}, []bool{true}, nil},
		}},
		{"a refund marked as a charge is a refund", []step{
			{0, []window.Counter{charge(storetest.Req("rc", 10, 4))}, true, []uint64{4}, []bool{false}, nil},
			{0, []window.Counter{charge(refund(storetest.Req("rc", 10, 3)))}, true, []uint64{1}, []bool{false}, nil},
		}},
		{"a sliding charge weighs into the next window", []step{
			{30 * time.Second, []window.Counter{sliding(charge(storetest.Req("slc", 10, 8)))}, true, []uint64{8}, []bool{false}, nil},
			{30 * time.Second, []window.Counter{sliding(charge(storetest.Req("slc", 10, 8)))}, false, []uint64{16}, []bool{true}, nil},
			// 15 s into the next window: 16*3/4 = 12, over until it falls.
			{75 * time.Second, []window.Counter{sliding(storetest.Req("slc", 10, 0))}, false, []uint64{0}, []bool{true}, nil},
			// 45 s in: 16/4 = 4, room again.
			{105 * time.Second, []window.Counter{sliding(storetest.Req("slc", 10, 0))}, true, []uint64{0}, []bool{false}, []uint64{6}},
		}},
		{"sliding window weighs the previous window", []step{
			{30 * time.Second, []window.Counter{sliding(storetest.Req("sl", 10, 10))}, true, []uint64{10}, []bool{false}, nil},
			// 15 s into the next window, 3/4 of the previous still counts: 7.5 + 0.
			{75 * time.Second, []window.Counter{sliding(storetest.Req("sl", 10, 3))}, false, []uint64{0}, []bool{true}, nil},
			{75 * time.Second, []window.Counter{sliding(storetest.Req("sl", 10, 2))}, true, []uint64{2}, []bool{false}, []uint64{0}},
			// 45 s in, 1/4 counts: 2.5 + 2 = 4.5, room for 5.
			{105 * time.Second, []window.Counter{sliding(storetest.Req("sl", 10, 5))}, true, []uint64{7}, []bool{false}, []uint64{0}},
		}},
	}
	for kind, newStore := range stores() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					for i, st := range tt.steps {
						now := storetest.T0.Add(st.at)
						reqs := make([]window.Counter, len(st.reqs))
						for j, r := range st.reqs {
							r.Key = "test:{" + tt.name + "/" + r.Key[len("test:{"):]
							reqs[j] = r
						}
						ok, res := storetest.Take(t, s, now, reqs...)
						if ok != st.allowed {
							t.Errorf("step %d: allowed = %v, want %v", i, ok, st.allowed)
						}
						for j := range res {
							if res[j].Count != st.counts[j] || res[j].Over != st.over[j] {
								t.Errorf("step %d req %d: count %d over %v, want %d %v", i, j, res[j].Count, res[j].Over, st.counts[j], st.over[j])
							}
							if st.remaining != nil {
								if got := reqs[j].Remaining(res[j], now); got != st.remaining[j] {
									t.Errorf("step %d req %d: Remaining = %d, want %d", i, j, got, st.remaining[j])
								}
							}
						}
					}
				})
			}
		})
	}
}

func TestReset(t *testing.T) {
	t.Parallel()
	now := storetest.T0.Add(15 * time.Second)
	fixed := storetest.Req("x", 10, 1)
	if got := fixed.Reset(window.Result{Count: 10}, now); got != 45*time.Second {
		t.Errorf("fixed Reset = %v, want 45s", got)
	}
	sl := fixed
	sl.Algorithm = window.SlidingWindow
	for _, tt := range []struct {
		name string
		res  window.Result
		want time.Duration
	}{
		{"room left: to the boundary", window.Result{Count: 2, Previous: 4}, 45 * time.Second},
		// 10*(3/4) + 2 = 9.5 -> full; need prev*(left/60) <= 7: left <= 42 s, so wait 3 s.
		{"full by the previous window", window.Result{Count: 2, Previous: 10}, 3 * time.Second},
		// current alone full: past the boundary, 10*(1-t/60) <= 9: t >= 6 s.
		{"full by the current window", window.Result{Count: 10, Previous: 0}, 51 * time.Second},
	} {
		if got := sl.Reset(tt.res, now); got != tt.want {
			t.Errorf("%s: sliding Reset = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestMemorySweepsExpiredCounters(t *testing.T) {
	t.Parallel()
	m := window.NewMemory()
	for i := range 100 {
		storetest.Take(t, m, storetest.T0, window.Counter{Key: "k" + strconv.Itoa(i), Limit: 5, Size: time.Second, Hits: 1})
	}
	if n := m.Len(); n != 100 {
		t.Fatalf("Len = %d, want 100", n)
	}
	// Two seconds later every 1 s window plus its 1 s grace is over.
	storetest.Take(t, m, storetest.T0.Add(2*time.Second), window.Counter{Key: "fresh", Limit: 5, Size: time.Second, Hits: 1})
	if n := m.Len(); n != 1 {
		t.Errorf("Len after expiry = %d, want 1", n)
	}
}
