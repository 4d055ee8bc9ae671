package faults

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/local"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/xds/xdstest"
)

var (
	soakFor  = flag.Duration("soak.duration", time.Minute, "how long the soak runs (make soak: 30m)")
	soakRate = flag.Float64("soak.rate", 200, "calls per second over both replicas; 0: half the measured capacity of one")
	soakOut  = flag.String("soak.out", "", "directory for soak.json and soak.md (default: none written)")
)

// Soak limits: what TestSoak fails on beyond a lost charge or an admission
// over a limit. Growth is the least-squares slope over the samples after
// the first fifth of the run, judged only on runs of ten minutes or more
// (a minute cannot tell a leak from warming up); goroutines and descriptors
// are held to a bound on any run.
const (
	maxRSSSlopeMBPerMin  = 0.5
	maxHeapSlopeMBPerMin = 0.5
	maxGoroutineGrowth   = 50
	maxFDGrowth          = 20
)

// TestSoak runs two sidecar replicas on one Sentinel-managed Redis, one
// reading rules from a file and one from an xDS server, under a steady load
// for -soak.duration; every minute (a third of a shorter run) the file is
// rewritten and a new xDS snapshot pushed, and every ten minutes (half a
// shorter run) Sentinel fails the master over. It fails on any charge lost
// or counted twice, any admission on a key over its limit across the
// replicas, and growth beyond the limits above.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("soak: not in -short")
	}
	ctx := t.Context()
	dir := t.TempDir()
	bin := buildSidecar(t, dir)
	every := min(time.Minute, *soakFor/3)
	failoverEvery := min(10*time.Minute, *soakFor/2)
	sample := min(time.Minute, *soakFor/12)

	sentinel := redistest.StartSentinel(t)
	redisArgs := []string{"-redis-mode", "sentinel", "-redis-addrs", strings.Join(sentinel.SentinelAddrs, ","),
		"-redis-master-name", sentinel.MasterName}
	rules := filepath.Join(dir, "rules", "faults.yaml")
	if err := os.MkdirAll(filepath.Dir(rules), 0o755); err != nil {
		t.Fatal(err)
	}
	writeRules := func(n int) {
		if err := os.WriteFile(rules, fmt.Appendf(nil, "# reload %d\n%s", n, Rules), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeRules(0)
	xds := xdstest.Start(t, "soak")
	xds.Push(soakConfig()) // served when the replica connects
	log := func(name string) *os.File {
		f, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		return f
	}
	files, err := StartSidecarArgs(ctx, bin, log("files"), append([]string{"-config", filepath.Dir(rules)}, redisArgs...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(files.Stop)
	files.Name = "files"
	viaXDS, err := StartSidecarArgs(ctx, bin, log("xds"), append([]string{"-config-type", "grpc-xds-sotw",
		"-xds-server-url", xds.Addr, "-xds-node-id", "soak"}, redisArgs...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(viaXDS.Stop)
	viaXDS.Name = "xds"
	replicas := []*Server{files, viaXDS}
	conns := make([]*grpc.ClientConn, len(replicas))
	for i, r := range replicas {
		if conns[i], err = grpc.NewClient(r.Addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conns[i].Close() })
	}

	load := Load{Rate: *soakRate / 2, InFlight: 50, Deadline: time.Second, Domain: "faults", Keys: 1000, HotEvery: 10, HotValue: "soak"}
	if *soakRate == 0 {
		load.Rate = Capacity(ctx, conns[0], load, 50, 3*time.Second) / 2 / 2
	}
	t.Logf("soak: %v, %.0f calls/s on each of 2 replicas; rules rewritten and xDS pushed every %v, a failover every %v",
		*soakFor, load.Rate, every, failoverEvery)

	start := time.Now().Add(100 * time.Millisecond)
	calls := make([][]Call, len(replicas))
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() { calls[i] = load.Run(ctx, conns[i], start, *soakFor) })
	}
	var usage [][]Usage // per sample, per replica
	tick := time.NewTicker(sample)
	defer tick.Stop()
	nextChange, nextFailover := start.Add(every), start.Add(failoverEvery)
	reloads, failovers := 0, 0
	sentinelClient := redis.NewSentinelClient(&redis.Options{Addr: sentinel.SentinelAddrs[0]})
	t.Cleanup(func() { _ = sentinelClient.Close() })
	var failedOver []time.Duration // when each failover began, from start
	for range int(*soakFor / sample) {
		now := <-tick.C
		if now.After(nextChange) && time.Until(start.Add(*soakFor)) > sample/2 {
			reloads++
			writeRules(reloads)
			xds.WaitAck(xds.Push(soakConfig()), 10*time.Second)
			nextChange = nextChange.Add(every)
		}
		if now.After(nextFailover) && time.Until(start.Add(*soakFor)) > sample/2 {
			failovers++
			old := masterAddr(ctx, t, sentinelClient, sentinel.MasterName)
			failedOver = append(failedOver, time.Since(start))
			if err := sentinelClient.Failover(ctx, sentinel.MasterName).Err(); err != nil {
				t.Errorf("failover %d: %v", failovers, err)
			} else if _, err := sentinel.WaitForNewMaster(ctx, old); err != nil {
				t.Errorf("failover %d: %v", failovers, err)
			}
			nextFailover = nextFailover.Add(failoverEvery)
		}
		row := make([]Usage, len(replicas))
		for i, r := range replicas {
			row[i] = Sample(ctx, r, 0)
		}
		usage = append(usage, row)
	}
	wg.Wait()

	var samples []SoakSample
	for i, r := range replicas {
		for j, row := range usage {
			from, to := time.Duration(j)*sample, time.Duration(j+1)*sample
			p := Summarize(calls[i], from, to, load.Deadline)
			samples = append(samples, SoakSample{Replica: r.Name, At: to.Minutes(), Usage: row[i], P99ms: p.P99ms, Calls: p.Calls,
				Decided: p.Kinds[OK.String()] + p.Kinds[OverLimit.String()]})
		}
	}
	for _, s := range samples {
		t.Logf("%-5s %5.2f min: RSS %5.1f MB heap %5.1f MB goroutines %4d fds %3d p99 %7.1f ms decided %d/%d",
			s.Replica, s.At, s.Usage.RSSMB, s.Usage.HeapMB, s.Usage.Goroutines, s.Usage.FDs, s.P99ms, s.Decided, s.Calls)
	}
	if reloads == 0 || failovers == 0 {
		t.Errorf("%d reloads and pushes, %d failovers: the soak changed nothing", reloads, failovers)
	}
	for _, r := range replicas {
		if body, err := local.Get(ctx, r.Metrics); err == nil && r.Name == "files" {
			if ok := metric(body, `ratelimit_reloads_total{result="ok"}`); ok < float64(reloads+1) {
				t.Errorf("files replica: %v rules loads, want %d: not every rewrite was reloaded", ok, reloads+1)
			}
		}
	}
	checkCharges(t, sentinel, calls, failedOver)
	checkGrowth(t, samples, *soakFor)
	if *soakOut != "" {
		writeSoak(t, samples)
	}
}

// soakConfig is Rules as an xDS RateLimitConfig.
func soakConfig() *rlsconfv3.RateLimitConfig {
	day := rlsconfv3.RateLimitUnit_DAY
	return &rlsconfv3.RateLimitConfig{Name: "faults", Domain: "faults", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "api_key", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: day, RequestsPerUnit: 1_000_000_000}},
		{Key: "hot", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: day, RequestsPerUnit: HotLimit}},
	}}
}

func masterAddr(ctx context.Context, t *testing.T, c *redis.SentinelClient, name string) string {
	a, err := c.GetMasterAddrByName(ctx, name).Result()
	if err != nil || len(a) != 2 {
		t.Fatalf("sentinel: master of %s: %v %v", name, a, err)
	}
	return a[0] + ":" + a[1]
}

// checkCharges compares what Redis counted with what the replicas
// answered: every allowed call on an api_key value counted once (nothing
// lost, a call that failed counted at most once), and no more than the
// limit allowed on the hot key across both replicas. A failover loses no
// charge: behind Sentinel the sidecar admits on a count only once a replica
// has it (-redis-sentinel-wait-replicas), so what the old master drops was
// never admitted.
func checkCharges(t *testing.T, s *redistest.Sentinel, calls [][]Call, failovers []time.Duration) {
	t.Helper()
	ctx := t.Context()
	client := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs})
	defer client.Close()
	var counted int64
	iter := client.Scan(ctx, 0, "faults:*api_key=*", 1000).Iterator()
	for iter.Next(ctx) {
		v, err := client.Get(ctx, iter.Val()).Int64()
		if err != nil {
			t.Fatalf("GET %s: %v", iter.Val(), err)
		}
		counted += v
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	var allowed, uncertain int64
	hotOK := 0
	for _, cs := range calls {
		for _, c := range cs {
			switch {
			case c.Hot && c.Kind == OK:
				hotOK++
			case c.Hot:
			case c.Kind == OK:
				allowed++
			case !c.Kind.Decided():
				uncertain++ // may or may not have run in Redis
			}
		}
	}
	t.Logf("charges: %d counted in Redis for %d allowed and %d failed calls, through %d failovers; %d allowed on the hot key (limit %d)",
		counted, allowed, uncertain, len(failovers), hotOK, HotLimit)
	if lost := allowed - counted; lost > 0 {
		t.Errorf("%d charges lost: Redis counted %d, the replicas allowed %d", lost, counted, allowed)
	}
	if counted > allowed+uncertain {
		t.Errorf("charges counted twice: Redis counted %d, the replicas allowed %d and %d failed", counted, allowed, uncertain)
	}
	if hotOK > HotLimit {
		t.Errorf("%d calls allowed on the hot key across the replicas, limit %d", hotOK, HotLimit)
	}
}

// checkGrowth holds each replica's samples to the soak's limits.
func checkGrowth(t *testing.T, samples []SoakSample, d time.Duration) {
	t.Helper()
	by := map[string][]SoakSample{}
	for _, s := range samples {
		by[s.Replica] = append(by[s.Replica], s)
	}
	for name, ss := range by {
		ss = ss[len(ss)/5:] // after warming up
		if len(ss) < 2 {
			continue
		}
		first, last := ss[0].Usage, ss[len(ss)-1].Usage
		if last.Goroutines > first.Goroutines+maxGoroutineGrowth {
			t.Errorf("%s: goroutines grew from %d to %d", name, first.Goroutines, last.Goroutines)
		}
		if last.FDs > first.FDs+maxFDGrowth {
			t.Errorf("%s: file descriptors grew from %d to %d", name, first.FDs, last.FDs)
		}
		rss := slope(ss, func(s SoakSample) float64 { return s.Usage.RSSMB })
		heap := slope(ss, func(s SoakSample) float64 { return s.Usage.HeapMB })
		t.Logf("%s: RSS %+.2f MB/min, heap %+.2f MB/min after warming up", name, rss, heap)
		if d >= 10*time.Minute && (rss > maxRSSSlopeMBPerMin || heap > maxHeapSlopeMBPerMin) {
			t.Errorf("%s: RSS grows %.2f MB/min, heap %.2f MB/min; limits %v and %v", name, rss, heap, maxRSSSlopeMBPerMin, maxHeapSlopeMBPerMin)
		}
	}
}

// slope is the least-squares slope of f over the samples, per minute.
func slope(ss []SoakSample, f func(SoakSample) float64) float64 {
	var n, sx, sy, sxx, sxy float64
	for _, s := range ss {
		x, y := s.At, f(s)
		n++
		sx += x
		sy += y
		sxx += x * x
		sxy += x * y
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return math.NaN()
	}
	return (n*sxy - sx*sy) / den
}

func writeSoak(t *testing.T, samples []SoakSample) {
	if err := os.MkdirAll(*soakOut, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(samples, "", " ")
	if err == nil {
		err = os.WriteFile(filepath.Join(*soakOut, "soak.json"), b, 0o644)
	}
	if err == nil {
		err = SoakChart(filepath.Join(*soakOut, "soak.png"), samples)
	}
	if err != nil {
		t.Fatal(err)
	}
}
