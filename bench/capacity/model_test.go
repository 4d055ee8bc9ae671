package main

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestKeySlot: Redis's own CRC16 check value and slots from its documentation.
func TestKeySlot(t *testing.T) {
	t.Parallel()
	if got := crc16("123456789"); got != 0x31c3 {
		t.Errorf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for key, want := range map[string]int{"foo": 12182, "bar": 5061, "hello": 866} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
}

// TestSlotRanges: the ranges redis-cli --cluster create prints for 3 masters, and 2 and 1.
func TestSlotRanges(t *testing.T) {
	t.Parallel()
	for m, want := range map[int][]int{1: {0}, 2: {0, 8192}, 3: {0, 5461, 10923}} {
		if got := slotRanges(m); !slices.Equal(got, want) {
			t.Errorf("slotRanges(%d) = %v, want %v", m, got, want)
		}
	}
}

func TestZipfShares(t *testing.T) {
	t.Parallel()
	// 1, 1/2, 1/3 over 11/6.
	got := zipfShares(3, 1)
	for i, want := range []float64{6.0 / 11, 3.0 / 11, 2.0 / 11} {
		if !near(got[i], want) {
			t.Errorf("zipfShares(3, 1)[%d] = %v, want %v", i, got[i], want)
		}
	}
	for _, p := range zipfShares(4, 0) {
		if !near(p, 0.25) {
			t.Errorf("zipfShares(4, 0) = %v, want 1/4 each", zipfShares(4, 0))
			break
		}
	}
}

// threeKeys are foo (slot 12182, the third of 3 masters), bar (5061) and hello (866), both on the first.
var threeKeys = workload{keys: 3, name: func(r int) string { return []string{"foo", "bar", "hello"}[r-1] }}

// TestSimulate works out a small cluster by hand: 3 equally busy keys, 2 on master 0 and 1 on master 2.
func TestSimulate(t *testing.T) {
	t.Parallel()
	c := costs{sidecarUs: 20, redisUs: 5, roundTrips: 0.1, redisBytes: 100}
	got := simulate(c, 300000, newKeyLoad(threeKeys), evenRanges, 4, 3)
	want := cluster{costs: c, placement: evenRanges, replicas: 4, shards: 3,
		sidecarCores:    6,   // 300000 × 20 µs
		perReplicaCores: 1.5, // over 4
		redisCores:      1.5, // 300000 × 5 µs
		maxShardCores:   1,   // two thirds of it on master 0
		balance:         2,   // (2/3) / (1/3)
		hottestSlot:     1.0 / 3,
		hottestKey:      1.0 / 3,
		keyCeiling:      200000, // 1e6 / 5 µs
		rateCeiling:     600000, // a key of a third of the load reaches 200000/s at 600000/s
		roundTripsPS:    30000,
		wireMBps:        30,
	}
	if !clusterNear(got, want) {
		t.Errorf("simulate() = %+v\nwant %+v", got, want)
	}
	// Placed by load, 3 masters get a key each.
	if got := simulate(c, 300000, newKeyLoad(threeKeys), balanced, 4, 3); !near(got.maxShardCores, 0.5) || !near(got.balance, 1) {
		t.Errorf("balanced: busiest master %v cores, balance %v, want 0.5, 1", got.maxShardCores, got.balance)
	}
}

func clusterNear(a, b cluster) bool {
	return a.costs == b.costs && a.placement == b.placement && a.replicas == b.replicas && a.shards == b.shards &&
		near(a.sidecarCores, b.sidecarCores) && near(a.perReplicaCores, b.perReplicaCores) &&
		near(a.redisCores, b.redisCores) && near(a.maxShardCores, b.maxShardCores) && near(a.balance, b.balance) &&
		near(a.hottestSlot, b.hottestSlot) && near(a.hottestKey, b.hottestKey) && near(a.keyCeiling, b.keyCeiling) &&
		near(a.rateCeiling, b.rateCeiling) && near(a.roundTripsPS, b.roundTripsPS) && near(a.wireMBps, b.wireMBps)
}

// TestSize: the fewest replicas and masters that keep every core at most util busy.
func TestSize(t *testing.T) {
	t.Parallel()
	c := costs{sidecarUs: 20, redisUs: 5}
	kl := newKeyLoad(threeKeys)
	for _, tt := range []struct {
		name           string
		rate           float64
		pl             placement
		util           float64
		replicas, want int
		feasible, hot  bool
	}{
		// 1.5 Redis cores (0.5 a key) at util 1 fit 2 masters: by load, two keys on one and one on the other;
		// even ranges put bar and hello on slots 0-8191, foo on 8192-16383: 1.0 and 0.5 cores.
		{"two by load", 300000, balanced, 1, 3, 2, true, false},
		{"two even", 300000, evenRanges, 1, 3, 2, true, false},
		// At util 0.5 each key needs a master of its own. By load that is 3; even ranges part hello (866) and
		// bar (5061) only once a range is shorter than 5061-866 slots: 4 masters of 4096 (866, 5061 and 12182
		// on masters 0, 1 and 2). With at most 3 masters they never fit.
		{"three by load", 300000, balanced, 0.5, 6, 3, true, false},
		{"four even", 300000, evenRanges, 0.5, 6, 4, true, false},
		// At 400000/s one key takes 400000/3 × 5 µs = 0.67 core: no master can hold it at util 0.5.
		{"hot slot", 400000, balanced, 0.5, 8, 0, false, true},
	} {
		got := size(c, tt.rate, kl, tt.pl, tt.util, 2, 8)
		if tt.name == "four even" {
			if short := size(c, tt.rate, kl, tt.pl, tt.util, 2, 3); short.feasible || short.hotSlot || short.shardsText() != "over 3" {
				t.Errorf("even ranges, at most 3 masters: feasible %v, hot slot %v, %q; want false, false, \"over 3\"",
					short.feasible, short.hotSlot, short.shardsText())
			}
		}
		if got.replicas != tt.replicas || got.feasible != tt.feasible || got.hotSlot != tt.hot || (tt.feasible && got.shards != tt.want) {
			t.Errorf("%s: size() = %d replicas, %d masters, feasible %v, hot slot %v; want %d, %d, %v, %v",
				tt.name, got.replicas, got.shards, got.feasible, got.hotSlot, tt.replicas, tt.want, tt.feasible, tt.hot)
		}
	}
}

// TestRunTable: the command prints a row per cost set.
func TestRunTable(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	if err := run(t.Context(), []string{"-keys", "1000"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	for _, c := range measured {
		if !strings.Contains(out.String(), "| "+labels[c.name]+" |") {
			t.Errorf("no row for %s in\n%s", c.name, out.String())
		}
	}
}
