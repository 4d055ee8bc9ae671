package rlqs

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// checkClients fails unless cs holds exactly want: every id found at an
// index that holds it, and All yielding each once.
func checkClients(t *testing.T, cs *Clients, want map[string]ClientState) {
	t.Helper()
	if cs.Len() != len(want) {
		t.Fatalf("Len() = %d, want %d", cs.Len(), len(want))
	}
	for id, c := range want {
		i, got := cs.Lookup(id)
		if i < 0 || i >= cs.Len() || cs.ids[i] != id || got != c {
			t.Fatalf("Lookup(%q) = %d, %+v, want %+v", id, i, got, c)
		}
	}
	seen := map[string]ClientState{}
	for id, c := range cs.All() {
		if _, dup := seen[id]; dup {
			t.Fatalf("All() yields %q twice", id)
		}
		seen[id] = c
	}
	if !maps.Equal(seen, want) {
		t.Fatalf("All() = %v, want %v", seen, want)
	}
}

// TestClients runs random Sets, Deletes and DeleteExpireds against a map:
// the swap-remove keeps every other entry findable with its state.
func TestClients(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 1))
			var cs Clients // the zero value is ready to use
			if i, c := cs.Lookup("a"); i != -1 || c != (ClientState{}) {
				t.Fatalf("Lookup on the zero value = %d, %+v, want -1 and the zero state", i, c)
			}
			cs.Delete("a")
			want := map[string]ClientState{}
			for range 400 {
				id := fmt.Sprint("c", rng.IntN(12))
				switch op := rng.IntN(10); {
				case op < 5:
					c := ClientState{Rate: rng.Uint64N(100), Expires: t0.Add(time.Duration(rng.IntN(10)) * time.Second)}
					cs.Set(id, c)
					want[id] = c
				case op < 9:
					cs.Delete(id)
					delete(want, id)
				default:
					now := t0.Add(time.Duration(rng.IntN(10)) * time.Second)
					cs.DeleteExpired(now)
					maps.DeleteFunc(want, func(_ string, c ClientState) bool { return !c.Expires.After(now) })
				}
				checkClients(t, &cs, want)
			}
		})
	}
}

// Grow keeps what the set holds.
func TestClientsGrow(t *testing.T) {
	t.Parallel()
	var cs Clients
	cs.Grow(3)
	cs.Set("a", ClientState{Rate: 1})
	cs.Grow(10)
	cs.Set("b", ClientState{Rate: 2})
	checkClients(t, &cs, map[string]ClientState{"a": {Rate: 1}, "b": {Rate: 2}})
}

// Divide's answer does not depend on where the clients sit in the set,
// the reporting client's own entry included, and it leaves the set as it
// was: the sums and the earliest times it takes are of the whole set.
func TestDivideOrder(t *testing.T) {
	t.Parallel()
	live := t0.Add(10 * time.Second)
	clients := map[string]ClientState{
		"a": {Demand: 4 * PerSecond, Rate: 3 * PerSecond, Burst: 6, Expires: live, Reported: t0.Add(-5 * time.Second)},
		"b": {Demand: 9 * PerSecond, Rate: 2 * PerSecond, Burst: 4, Expires: live, Reported: t0.Add(-2 * time.Second)},
		"c": {Demand: PerSecond, Rate: 4 * PerSecond, Burst: 8, PrevRate: 5 * PerSecond, PrevBurst: 10,
			PrevUntil: t0.Add(2500 * time.Millisecond), Expires: live, Reported: t0.Add(-4 * time.Second)},
		"d": {Estimated: true, Rate: PerSecond, Burst: 2, Expires: t0.Add(3 * time.Second), Reported: t0.Add(-time.Second)},
		"e": {Demand: PerSecond, Rate: PerSecond, Burst: 2, Expires: t0}, // expired
		"f": {Demand: PerSecond, Rate: PerSecond, Burst: 2, Expires: t0.Add(-time.Minute)},
	}
	f := Fleet{Tokens: 10, Period: time.Second, Burst: 20}
	ids := slices.Sorted(maps.Keys(clients))
	for _, r := range []Report{
		{Client: "a", Allowed: 20, Denied: 30, Elapsed: 5 * time.Second},
		{Client: "b", Elapsed: 5 * time.Second},
		{Client: "new", Denied: 3},
	} {
		type answer struct {
			share   Share
			cur     ClientState
			expired []string
		}
		var first *answer
		rng := rand.New(rand.NewPCG(uint64(len(r.Client)), 2))
		for range 10 {
			rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
			var cs Clients
			for _, id := range ids {
				cs.Set(id, clients[id])
			}
			self, _ := cs.Lookup(r.Client)
			s, cur, expired := Policy{}.Divide(t0, f, &cs, self, r, 15*time.Second)
			slices.Sort(expired)
			got := answer{s, cur, expired}
			checkClients(t, &cs, clients)
			if first == nil {
				first = &got
				if !slices.Equal(expired, []string{"e", "f"}) {
					t.Errorf("report of %q: expired %v, want [e f]", r.Client, expired)
				}
				continue
			}
			if got.share != first.share || got.cur != first.cur || !slices.Equal(got.expired, first.expired) {
				t.Fatalf("report of %q in order %v: %+v, want %+v as in another order", r.Client, ids, got, *first)
			}
		}
	}
}
