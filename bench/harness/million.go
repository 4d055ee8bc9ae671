package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/result"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/proctest"
)

// keySpaceLoad is the load of the key-space scenarios (million, million-sliding): -million-keys tenants whose
// counters live for an hour, sent one lap round before the measured interval starts, so that every counter is
// live in Redis while the sidecar keeps serving them all.
const keySpaceLoad = "tenants"

// rssEvery is how often a key-space run samples the server's RSS.
const rssEvery = 2 * time.Second

// memoryUsageSample is how many keys a key-space run asks Redis MEMORY USAGE of.
const memoryUsageSample = 1000

// keySpace is what a key-space run measured of Redis's memory per counter and of the server's RSS over time.
type keySpace struct {
	Values int `json:"values"` // distinct descriptor values the load cycled through
	// RedisKeys is DBSIZE after the run, summed over the nodes: one counter per value and window.
	RedisKeys uint64 `json:"redis_keys"`
	// RedisMemoryEmpty and RedisMemoryEnd are INFO used_memory with the server started and no counter yet, and
	// after the run.
	RedisMemoryEmpty uint64 `json:"redis_used_memory_empty"`
	RedisMemoryEnd   uint64 `json:"redis_used_memory_end"`
	// BytesPerKey is the growth of used_memory over RedisKeys: everything a counter costs Redis (key, value,
	// its entries in the key and expiry tables).
	BytesPerKey float64 `json:"redis_bytes_per_key"`
	// MemoryUsage is the mean MEMORY USAGE of SampledKeys keys (SCAN order): key and value, not the expiry entry.
	MemoryUsage float64 `json:"memory_usage_bytes_per_key"`
	SampledKeys int     `json:"sampled_keys"`
	KeyExample  string  `json:"key_example"`
	// RSS is the server's VmRSS every rssEvery from its start, S seconds from the start mark (negative in the
	// warm-up).
	RSS []rssPoint `json:"server_rss"`
	// RSSStart, RSSEnd and RSSMax are the first sample at or after the start mark, the last one before the end
	// mark, and the largest between them.
	RSSStart uint64 `json:"server_rss_start"`
	RSSEnd   uint64 `json:"server_rss_end"`
	RSSMax   uint64 `json:"server_rss_max"`
	// RSSSamples is how many samples fell between the marks.
	RSSSamples int `json:"server_rss_samples_measured"`
}

type rssPoint struct {
	S     float64 `json:"s"`
	Bytes uint64  `json:"bytes"`
}

// keySpaceProbe samples a server's RSS while a key-space run loads it and records when the marks came.
type keySpaceProbe struct {
	stop   func()
	mu     sync.Mutex
	points []time.Time
	rss    []uint64
	marks  []time.Time // start, end
}

// probeKeySpace starts sampling pid's RSS every rssEvery until stop.
func probeKeySpace(ctx context.Context, pid int) *keySpaceProbe {
	ctx, cancel := context.WithCancel(ctx)
	p := &keySpaceProbe{}
	done := make(chan struct{})
	p.stop = func() { cancel(); <-done }
	go func() {
		defer close(done)
		tick := time.NewTicker(rssEvery)
		defer tick.Stop()
		for {
			if v, err := rss(pid); err == nil {
				p.mu.Lock()
				p.points, p.rss = append(p.points, time.Now()), append(p.rss, v)
				p.mu.Unlock()
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	return p
}

// marking wraps a sampler so that the probe learns when the load generator's marks came.
func (p *keySpaceProbe) marking(snap func(*proctest.Process) sample) func(*proctest.Process) sample {
	return func(lg *proctest.Process) sample {
		s := snap(lg)
		if lg != nil {
			p.mu.Lock()
			p.marks = append(p.marks, time.Now())
			p.mu.Unlock()
		}
		return s
	}
}

// result stops the probe and measures the key space nodes hold after a run of values values; pre is the
// sample taken before the load started.
func (p *keySpaceProbe) result(ctx context.Context, nodes redisNodes, values int, pre sample, log io.Writer) *keySpace {
	p.stop()
	ks := &keySpace{Values: values}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.marks) == 2 {
		start, end := p.marks[0], p.marks[1]
		for i, at := range p.points {
			v := p.rss[i]
			ks.RSS = append(ks.RSS, rssPoint{S: math.Round(at.Sub(start).Seconds()*10) / 10, Bytes: v})
			if at.Before(start) || at.After(end) {
				continue
			}
			if ks.RSSStart == 0 {
				ks.RSSStart = v
			}
			ks.RSSEnd, ks.RSSMax = v, max(ks.RSSMax, v)
			ks.RSSSamples++
		}
	}
	if len(nodes) == 0 {
		return ks
	}
	if pre.redis != nil {
		ks.RedisMemoryEmpty = pre.redis.usedMemory
	}
	if info, err := nodes.info(ctx); err == nil {
		ks.RedisMemoryEnd = info.usedMemory
	} else {
		fmt.Fprintln(log, "harness:", err)
	}
	for _, n := range nodes {
		size, err := n.client.DBSize(ctx).Result()
		if err != nil {
			fmt.Fprintln(log, "harness: DBSIZE:", err)
			return ks
		}
		ks.RedisKeys += uint64(size)
	}
	if ks.RedisKeys > 0 && ks.RedisMemoryEnd > ks.RedisMemoryEmpty {
		ks.BytesPerKey = float64(ks.RedisMemoryEnd-ks.RedisMemoryEmpty) / float64(ks.RedisKeys)
	}
	if err := ks.sampleMemoryUsage(ctx, nodes[0].client); err != nil {
		fmt.Fprintln(log, "harness: MEMORY USAGE:", err)
	}
	return ks
}

// sampleMemoryUsage sets MemoryUsage from the first memoryUsageSample keys SCAN returns.
func (ks *keySpace) sampleMemoryUsage(ctx context.Context, c *redis.Client) error {
	var keys []string
	var cursor uint64
	for len(keys) < memoryUsageSample {
		page, next, err := c.Scan(ctx, cursor, "*", 1000).Result()
		if err != nil {
			return err
		}
		keys = append(keys, page...)
		if cursor = next; cursor == 0 {
			break
		}
	}
	keys = keys[:min(len(keys), memoryUsageSample)]
	if len(keys) == 0 {
		return nil
	}
	pipe := c.Pipeline()
	cmds := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.MemoryUsage(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	var sum int64
	for _, cmd := range cmds {
		sum += cmd.Val()
	}
	ks.SampledKeys, ks.KeyExample = len(keys), keys[0]
	ks.MemoryUsage = float64(sum) / float64(len(keys))
	return nil
}

// summarizeKeySpace returns the medians of the key-space figures of name's successful runs, nil if none has any.
func summarizeKeySpace(runs []runResult, name string) *result.KeySpace {
	var s result.KeySpace
	var kpv, memE, memN, bpk, mu, rssS, rssE, rssM []float64
	mib := func(b uint64) float64 { return float64(b) / (1 << 20) }
	for _, run := range runs {
		ks := run.KeySpace
		if run.Scenario != name || run.Error != "" || ks == nil {
			continue
		}
		s.Values, s.SampledKeys, s.KeyExample = ks.Values, ks.SampledKeys, ks.KeyExample
		if ks.Values > 0 && ks.RedisKeys > 0 {
			kpv = append(kpv, float64(ks.RedisKeys)/float64(ks.Values))
		}
		if ks.BytesPerKey > 0 {
			memE, memN = append(memE, mib(ks.RedisMemoryEmpty)), append(memN, mib(ks.RedisMemoryEnd))
			bpk = append(bpk, ks.BytesPerKey)
		}
		if ks.MemoryUsage > 0 {
			mu = append(mu, ks.MemoryUsage)
		}
		if ks.RSSStart > 0 {
			rssS, rssE, rssM = append(rssS, mib(ks.RSSStart)), append(rssE, mib(ks.RSSEnd)), append(rssM, mib(ks.RSSMax))
			s.Samples = ks.RSSSamples
		}
	}
	if s.Values == 0 {
		return nil
	}
	med := func(xs []float64) *float64 {
		if len(xs) == 0 {
			return nil
		}
		return opt(median(slices.Clone(xs)))
	}
	s.KeysPerVal, s.MemEmptyMiB, s.MemEndMiB, s.BytesPerKey = med(kpv), med(memE), med(memN), med(bpk)
	s.MemoryUsage, s.RSSStartMiB, s.RSSEndMiB, s.RSSMaxMiB = med(mu), med(rssS), med(rssE), med(rssM)
	return &s
}

// keySpaceNote is the line the results table gets for key-space scenario label.
func keySpaceNote(s *result.KeySpace, label string) string {
	f := fmtOpt
	var sb strings.Builder
	fmt.Fprintf(&sb, "Key space, %s: %d values, %s Redis keys per value; Redis used_memory %s → %s MiB, %s bytes per key",
		label, s.Values, f(s.KeysPerVal, 2), f(s.MemEmptyMiB, 1), f(s.MemEndMiB, 1), f(s.BytesPerKey, 0))
	if s.MemoryUsage != nil {
		fmt.Fprintf(&sb, " (MEMORY USAGE of %d keys such as `%s`: %s bytes)", s.SampledKeys, s.KeyExample, f(s.MemoryUsage, 1))
	}
	fmt.Fprintf(&sb, "; sidecar RSS over the measured interval (%d samples, every %v): %s MiB at its start, %s at its end, %s at most.\n",
		s.Samples, rssEvery, f(s.RSSStartMiB, 1), f(s.RSSEndMiB, 1), f(s.RSSMaxMiB, 1))
	return sb.String()
}
