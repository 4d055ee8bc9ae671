package main

import (
	"cmp"
	"container/heap"
	"math"
	"slices"
	"strconv"
)

// slots is the number of Redis Cluster hash slots.
const slots = 16384

// costs are what one decision costs, as the harness measures it (medians of its runs).
type costs struct {
	name       string
	sidecarUs  float64 // the rate-limit server's own CPU, µs per decision
	redisUs    float64 // Redis CPU, µs per decision, summed over its processes
	roundTrips float64 // store round trips per decision (0 when not measured)
	redisBytes float64 // bytes Redis read and wrote on its client connections per decision
}

// workload is the traffic the model serves: rate decisions per second over keys counters whose popularity
// follows Zipf's law with exponent zipf (0: uniform), the key of rank r (1 is the hottest) named name(r).
type workload struct {
	rate float64
	keys int
	zipf float64
	name func(rank int) string
}

// tenantKey names the key of rank r as the sidecar's hash tag for api_key=t<r> in domain rl: a key's slot is
// that of its tag, so every window of a descriptor lives on one shard.
func tenantKey(r int) string { return "rl|api_key=t" + strconv.Itoa(r) }

// zipfShares returns the share of decisions of each rank 1..n (index r-1): r^-s over their sum.
func zipfShares(n int, s float64) []float64 {
	w := make([]float64, n)
	var sum float64
	for r := n; r >= 1; r-- { // smallest first, for a more exact sum
		w[r-1] = math.Pow(float64(r), -s)
		sum += w[r-1]
	}
	for i := range w {
		w[i] /= sum
	}
	return w
}

// slotShares returns each hash slot's share of the workload's decisions and the hottest key's share.
func slotShares(w workload) (shares []float64, hottestKey float64) {
	shares = make([]float64, slots)
	for i, p := range zipfShares(w.keys, w.zipf) {
		shares[keySlot(w.name(i+1))] += p
		hottestKey = max(hottestKey, p)
	}
	return shares, hottestKey
}

// keySlot is Redis Cluster's HASH_SLOT for a key without braces (or the content of its hash tag).
func keySlot(key string) int { return int(crc16(key)) % slots }

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), the checksum Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// slotRanges returns the first slot of each of m masters, as redis-cli --cluster create splits the slots: m
// contiguous ranges of 16384/m slots, the boundaries rounded, the last range ending at 16383.
func slotRanges(m int) []int {
	first := make([]int, m)
	per := float64(slots) / float64(m)
	cursor := 0.0
	next := 0
	for i := range m {
		first[i] = next
		last := int(math.Round(cursor + per - 1))
		if last > slots-1 || i == m-1 {
			last = slots - 1
		}
		cursor += per
		next = last + 1
	}
	return first
}

// shardShares folds slot shares onto m masters that own slotRanges(m).
func shardShares(slotShare []float64, m int) []float64 {
	first := slotRanges(m)
	out := make([]float64, m)
	shard := 0
	for slot, p := range slotShare {
		for shard+1 < m && slot >= first[shard+1] {
			shard++
		}
		out[shard] += p
	}
	return out
}

// balancedShares folds slot shares onto m masters whose slots were placed to even out their load (as an
// operator does with redis-cli --cluster rebalance, or by moving a hot slot off a busy master): the busiest slot
// first, each to the least loaded master (longest processing time first, within 4/3 of the best placement).
func balancedShares(slotShare []float64, m int) []float64 {
	order := make([]int, len(slotShare))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(slotShare[b], slotShare[a]) })
	out := make([]float64, m)
	h := &loads{share: out, idx: make([]int, m)}
	for i := range h.idx {
		h.idx[i] = i
	}
	for _, slot := range order {
		if slotShare[slot] == 0 {
			break
		}
		out[h.idx[0]] += slotShare[slot]
		heap.Fix(h, 0)
	}
	return out
}

// loads is a min-heap of master indexes by their share.
type loads struct {
	share []float64
	idx   []int
}

func (h *loads) Len() int           { return len(h.idx) }
func (h *loads) Less(i, j int) bool { return h.share[h.idx[i]] < h.share[h.idx[j]] }
func (h *loads) Swap(i, j int)      { h.idx[i], h.idx[j] = h.idx[j], h.idx[i] }
func (h *loads) Push(any)           { panic("capacity: loads is fixed") }
func (h *loads) Pop() any           { panic("capacity: loads is fixed") }

// placement is how slots are spread over the masters.
type placement int

const (
	evenRanges placement = iota // redis-cli --cluster create: equal contiguous ranges
	balanced                    // slots placed by their load (balancedShares)
)

// cluster is the model's answer for one cost set, workload and size.
type cluster struct {
	costs     costs
	placement placement
	replicas  int // sidecar replicas the load is spread over evenly (Envoy balances calls)
	shards    int // Redis Cluster masters

	sidecarCores    float64 // all replicas
	perReplicaCores float64
	redisCores      float64 // all shards
	maxShardCores   float64 // the busiest shard: one Redis core's worth is its ceiling
	balance         float64 // busiest shard over the mean
	hottestSlot     float64 // share of decisions on the busiest slot
	hottestKey      float64 // share of decisions on the busiest key
	// keyCeiling is the most decisions/s one key (so one slot, so one Redis thread) takes, at 100% of a core.
	keyCeiling float64
	// rateCeiling is the total rate at which the busiest slot reaches a whole core: past it, adding shards
	// does not help, because a slot cannot be split.
	rateCeiling  float64
	roundTripsPS float64 // store round trips per second, all replicas
	wireMBps     float64 // Redis client traffic, MB/s (10^6 bytes), all shards
}

// keyLoad is a workload's spread over the slots, which does not depend on its rate.
type keyLoad struct {
	slotShare  []float64
	hottestKey float64
}

func newKeyLoad(w workload) keyLoad {
	s, h := slotShares(w)
	return keyLoad{slotShare: s, hottestKey: h}
}

// simulate spreads rate decisions/s of the key load kl over replicas sidecars and shards masters, with costs c.
func simulate(c costs, rate float64, kl keyLoad, pl placement, replicas, shards int) cluster {
	r := cluster{costs: c, placement: pl, replicas: replicas, shards: shards, hottestKey: kl.hottestKey}
	r.sidecarCores = rate * c.sidecarUs / 1e6
	r.perReplicaCores = r.sidecarCores / float64(replicas)
	r.redisCores = rate * c.redisUs / 1e6
	var shardShare []float64
	if pl == balanced {
		shardShare = balancedShares(kl.slotShare, shards)
	} else {
		shardShare = shardShares(kl.slotShare, shards)
	}
	var maxShare float64
	for _, p := range shardShare {
		maxShare = max(maxShare, p)
	}
	for _, p := range kl.slotShare {
		r.hottestSlot = max(r.hottestSlot, p)
	}
	r.maxShardCores = rate * maxShare * c.redisUs / 1e6
	r.balance = maxShare * float64(shards)
	r.keyCeiling = 1e6 / c.redisUs
	r.rateCeiling = r.keyCeiling / r.hottestSlot
	r.roundTripsPS = rate * c.roundTrips
	r.wireMBps = rate * c.redisBytes / 1e6
	return r
}

// plan is the smallest cluster that serves a workload with every core at most util busy.
type plan struct {
	cluster
	util     float64
	feasible bool // false: no size up to the limit kept the busiest shard under util
	hotSlot  bool // not feasible because the busiest slot alone needs more than util of a core
}

// size finds the fewest replicas (of coresPerReplica cores each) and masters that keep every sidecar core and
// every master's one Redis core at most util busy, trying up to maxShards masters.
func size(c costs, rate float64, kl keyLoad, pl placement, util, coresPerReplica float64, maxShards int) plan {
	sidecarCores := rate * c.sidecarUs / 1e6
	replicas := max(1, int(math.Ceil(sidecarCores/(coresPerReplica*util)-1e-9)))
	// No fewer masters than the total Redis load needs.
	from := max(1, int(math.Ceil(rate*c.redisUs/1e6/util-1e-9)))
	var last cluster
	for m := from; m <= max(from, maxShards); m++ {
		last = simulate(c, rate, kl, pl, replicas, m)
		if last.maxShardCores <= util+1e-9 {
			return plan{cluster: last, util: util, feasible: true}
		}
		if last.hottestSlot*rate*c.redisUs/1e6 > util+1e-9 {
			return plan{cluster: last, util: util, hotSlot: true} // too much for any master
		}
	}
	return plan{cluster: last, util: util}
}

// shardsText renders the plan's master count, or why there is none.
func (p plan) shardsText() string {
	switch {
	case p.hotSlot:
		return "none (hot slot)"
	case !p.feasible:
		return "over " + strconv.Itoa(p.shards)
	}
	return strconv.Itoa(p.shards)
}
