package faults

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/faultproxy"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/racetest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/redistest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/reftest"
)

var (
	full        = flag.Bool("faults.full", false, "run every fault against the sidecar and envoyproxy/ratelimit (bench/faults.sh); without it, the short CI run: a few faults, the sidecar alone")
	out         = flag.String("faults.out", "", "directory for results.json and tables.md (default: none written)")
	reference   = flag.String("faults.reference", "", "prebuilt envoyproxy/ratelimit binary (default: go install "+reftest.Pkg+")")
	rate        = flag.Float64("faults.rate", 0, "calls per second offered to each server; 0: half the measured capacity of the slowest, split between the servers, which run at once (full); 200 (short)")
	only        = flag.String("faults.only", "", "comma-separated fault names to run (default: all of the mode's)")
	phase       = flag.Duration("faults.phase", 0, "length of the fault and of the time after it (default 10s full, 3s short)")
	deadline    = flag.Duration("faults.deadline", time.Second, "client deadline of each call")
	runs        = flag.Int("faults.runs", 1, "runs of the whole fault list; the tables give medians")
	also        = flag.String("faults.also", "", `more sidecars, each with its own flags: "name=flags;name=flags", e.g. "1 in flight=-redis-batch-workers 1;cap 15ms=-redis-timeout-cap 15ms"`)
	sidecarArgs = flag.String("faults.sidecar-args", "", "extra flags for the sidecar, space-separated (e.g. -redis-timeout-cap 15ms)")
)

// side is one server under test with its own Redis behind its own fault
// proxy, and its load.
type side struct {
	srv      *Server
	redis    *redistest.Server // single topology
	proxy    *faultproxy.Proxy // single topology: between the server and redis
	conn     *grpc.ClientConn
	args     []string            // a sidecar's flags beyond its rules and Redis
	sentinel *redistest.Sentinel // sentinel topology
	cluster  *redistest.Cluster  // cluster topology
}

// redisConns is how many connections the server holds to Redis, as the
// fault proxy sees them; 0 without one.
func (s *side) redisConns() int {
	if s.proxy == nil {
		return 0
	}
	return s.proxy.Conns()
}

// fault is one fault: apply starts it on every side and returns what ends
// it.
type fault struct {
	name     string
	short    bool   // in the CI run too
	topology string // "" (one redis-server behind a fault proxy), "sentinel" or "cluster": sides of their own
	apply    func(t *testing.T, sides []*side) (clear func())
}

func latency(l time.Duration) func(t *testing.T, sides []*side) func() {
	return setAll(faultproxy.Fault{Latency: l, Jitter: l / 2})
}

func setAll(f faultproxy.Fault) func(t *testing.T, sides []*side) func() {
	return func(_ *testing.T, sides []*side) func() {
		for _, s := range sides {
			s.proxy.Set(f)
		}
		return func() {
			for _, s := range sides {
				s.proxy.Set(faultproxy.Fault{})
			}
		}
	}
}

var allFaults = []fault{
	{name: "latency 0ms", apply: latency(0)},
	{name: "latency 1ms", apply: latency(time.Millisecond)},
	{name: "latency 2ms", apply: latency(2 * time.Millisecond)},
	{name: "latency 5ms", apply: latency(5 * time.Millisecond)},
	{name: "latency 10ms", short: true, apply: latency(10 * time.Millisecond)},
	{name: "latency 50ms", apply: latency(50 * time.Millisecond)},
	{name: "latency 250ms", apply: latency(250 * time.Millisecond)},
	// 16 KB/s each way: well under what the offered load needs.
	{name: "bandwidth 16KB/s", apply: setAll(faultproxy.Fault{Bandwidth: 16 << 10})},
	{name: "connection resets", short: true, apply: func(_ *testing.T, sides []*side) func() {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			for {
				for _, s := range sides {
					s.proxy.ResetConnections()
				}
				select {
				case <-tick.C:
				case <-stop:
					return
				}
			}
		})
		return func() { close(stop); wg.Wait() }
	}},
	{name: "blackhole", short: true, apply: setAll(faultproxy.Fault{Blackhole: true})},
	{name: "redis restarted, data lost", short: true, apply: func(t *testing.T, sides []*side) func() {
		for _, s := range sides {
			s.redis.Stop()
		}
		return func() {
			for _, s := range sides {
				s.redis.Restart(t)
			}
		}
	}},
	{name: "sentinel failover (master killed)", topology: "sentinel", apply: func(t *testing.T, sides []*side) func() {
		for _, s := range sides {
			s.sentinel.KillMaster()
		}
		return func() {}
	}},
	{name: "cluster master killed", topology: "cluster", apply: func(t *testing.T, sides []*side) func() {
		for _, s := range sides {
			s.cluster.Node(0).Stop()
		}
		return func() {}
	}},
	{name: "cpu starved", apply: func(t *testing.T, _ []*side) func() {
		// Two busy processes, one per core of the machine the figures were
		// taken on, at normal priority.
		var busy []*exec.Cmd
		for range 2 {
			c := exec.Command("sh", "-c", "while :; do :; done")
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			busy = append(busy, c)
		}
		return func() {
			for _, c := range busy {
				_ = c.Process.Kill()
				_ = c.Wait()
			}
		}
	}},
}

// TestFaults runs each fault under a steady open-loop load: a lead-in, the
// fault, and the time after it, on every server at once, each on its own
// Redis behind its own fault proxy. The short run (CI) checks the sidecar's
// promises; bench/faults.sh runs the full one and writes the figures.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("fault run: not in -short")
	}
	ctx := t.Context()
	dir := t.TempDir()
	rules := filepath.Join(dir, "faults.yaml")
	if err := os.WriteFile(rules, []byte(Rules), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := buildSidecar(t, dir)
	d := *phase
	if d == 0 {
		d = 3 * time.Second
		if *full {
			d = 10 * time.Second
		}
	}
	lead := 3 * time.Second

	connect := func(t *testing.T, s *side, srv *Server, err error) *side {
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Stop)
		conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		s.srv, s.conn = srv, conn
		return s
	}
	newSide := func(start func(redisAddr string) (*Server, error)) *side {
		r := redistest.Start(t)
		p, err := faultproxy.Start(ctx, r.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		srv, err := start(p.Addr())
		return connect(t, &side{redis: r, proxy: p}, srv, err)
	}
	logFile := func(name string) *os.File {
		name = strings.NewReplacer(" ", "-", ",", "").Replace(name)
		f, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		return f
	}
	extra := strings.Fields(*sidecarArgs)
	sides := []*side{newSide(func(addr string) (*Server, error) {
		return StartSidecar(ctx, bin, rules, addr, logFile("sidecar"), extra...)
	})}
	sides[0].args = extra
	for v := range strings.SplitSeq(*also, ";") {
		name, flags, ok := strings.Cut(v, "=")
		if !ok {
			continue
		}
		args := append(slices.Clip(extra), strings.Fields(flags)...)
		name = "sidecar, " + strings.TrimSpace(name)
		s := newSide(func(addr string) (*Server, error) {
			s, err := StartSidecar(ctx, bin, rules, addr, logFile(name), args...)
			if s != nil {
				s.Name = name
			}
			return s, err
		})
		s.args = args
		sides = append(sides, s)
	}
	var refBin, refRoot string
	if *full {
		refBin = *reference
		if refBin == "" {
			refBin = installReference(t, dir)
		}
		var err error
		if refRoot, err = ReferenceRoot(filepath.Join(dir, "reference-runtime")); err != nil {
			t.Fatal(err)
		}
		sides = append(sides, newSide(func(addr string) (*Server, error) {
			return StartReference(ctx, refBin, refRoot, addr, logFile("reference"))
		}))
	}

	load := Load{Rate: *rate, InFlight: 50, Deadline: *deadline, Domain: "faults", Keys: 1000, HotEvery: 10}
	if load.Rate == 0 {
		load.Rate = 200
		if *full {
			slowest := 0.0
			for _, s := range sides {
				c := Capacity(ctx, s.conn, load, 50, 3*time.Second)
				t.Logf("%s: capacity %.0f calls/s (50 in flight, no fault)", s.srv.Name, c)
				if slowest == 0 || c < slowest {
					slowest = c
				}
			}
			// The servers run at once on one machine: together they get
			// half of what the slowest could take alone.
			load.Rate = slowest / 2 / float64(len(sides))
		}
	}
	t.Logf("offered load: %.0f calls/s per server, %d in flight at most, client deadline %v", load.Rate, load.InFlight, load.Deadline)

	// A topology fault gets servers of its own, on a Sentinel-managed Redis
	// or a Cluster with a replica per master, each server on its own.
	topologySides := func(t *testing.T, topology string) []*side {
		var ss []*side
		for _, s := range sides {
			n := &side{}
			var srv *Server
			var err error
			switch topology {
			case "sentinel":
				n.sentinel = redistest.StartSentinel(t)
				if s.srv.Metrics != "" {
					srv, err = StartSidecarArgs(ctx, bin, logFile(s.srv.Name+"-sentinel"), append([]string{"-config", rules, "-redis-mode", "sentinel",
						"-redis-addrs", strings.Join(n.sentinel.SentinelAddrs, ","), "-redis-master-name", n.sentinel.MasterName}, s.args...)...)
				} else {
					srv, err = StartReferenceEnv(ctx, refBin, refRoot, logFile("reference-sentinel"), "REDIS_TYPE=sentinel",
						"REDIS_URL="+n.sentinel.MasterName+","+strings.Join(n.sentinel.SentinelAddrs, ","))
				}
			case "cluster":
				n.cluster = redistest.StartClusterWithReplicas(t, 3)
				if s.srv.Metrics != "" {
					srv, err = StartSidecarArgs(ctx, bin, logFile(s.srv.Name+"-cluster"), append([]string{"-config", rules, "-redis-mode", "cluster",
						"-redis-addrs", strings.Join(n.cluster.Addrs, ",")}, s.args...)...)
				} else {
					srv, err = StartReferenceEnv(ctx, refBin, refRoot, logFile("reference-cluster"), "REDIS_TYPE=cluster",
						"REDIS_URL="+strings.Join(n.cluster.Addrs, ","))
				}
			}
			if srv != nil {
				srv.Name = s.srv.Name
			}
			ss = append(ss, connect(t, n, srv, err))
		}
		return ss
	}
	var results []Result
	for run := range *runs {
		for _, f := range allFaults {
			if !selected(f) {
				continue
			}
			t.Logf("run %d/%d: %s", run+1, *runs, f.name)
			if f.topology == "" {
				results = append(results, runAndCheck(t, f, sides, load, lead, d)...)
				continue
			}
			// Its processes stop at the end of the subtest.
			t.Run(strings.ReplaceAll(f.name, " ", "_"), func(t *testing.T) {
				results = append(results, runAndCheck(t, f, topologySides(t, f.topology), load, lead, d)...)
			})
		}
	}
	if *out != "" {
		write(t, results, lead, d)
	}
}

// runAndCheck runs one fault, logs its figures and, in the short run,
// checks the sidecar's promises.
func runAndCheck(t *testing.T, f fault, sides []*side, load Load, lead, d time.Duration) []Result {
	{
		rs := runFault(t, f, sides, load, lead, d)
		for _, r := range rs {
			t.Logf("%-28s %-9s during: decided≤20ms %5.1f%% ≤deadline %5.1f%% p50 %7.1fms p99 %7.1fms %v; after: p99 %6.1fms; back to normal %.1fs; over-admitted %d; breaker opened %d",
				r.Fault, r.Server, 100*r.During.Within20ms, 100*r.During.WithinDeadline, r.During.P50ms, r.During.P99ms, r.During.Kinds,
				r.After.P99ms, r.BackToNormal, r.OverAdmitted, r.BreakerOpened)
		}
		if !*full {
			checkPromises(t, f, rs[0])
		}
		return rs
	}
}

func selected(f fault) bool {
	if *only != "" {
		for n := range strings.SplitSeq(*only, ",") {
			if strings.TrimSpace(n) == f.name {
				return true
			}
		}
		return false
	}
	return *full || f.short
}

// runFault runs one fault on every side at once: lead, then the fault for
// d, then d after it.
func runFault(t *testing.T, f fault, sides []*side, load Load, lead, d time.Duration) []Result {
	ctx := t.Context()
	hot := strings.NewReplacer(" ", "-", ",", "", "/", "-").Replace(f.name) + fmt.Sprint(time.Now().UnixNano())
	for _, s := range sides {
		exhaust(t, s, load, hot)
	}
	total := lead + 2*d
	logAt := make([]int64, len(sides))
	for i, s := range sides {
		logAt[i] = s.srv.LogSize()
	}
	start := time.Now().Add(100 * time.Millisecond)
	calls := make([][]Call, len(sides))
	var wg sync.WaitGroup
	for i, s := range sides {
		l := load
		l.HotValue = hot
		wg.Go(func() { calls[i] = l.Run(ctx, s.conn, start, total) })
	}
	// The sidecars' processes, every 250 ms.
	before, peak, end := make([]Usage, len(sides)), make([]Usage, len(sides)), make([]Usage, len(sides))
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
			case <-stop:
				return
			}
			for i, s := range sides {
				if s.srv.Metrics == "" {
					continue
				}
				u := Sample(ctx, s.srv, s.redisConns())
				if time.Since(start) < lead {
					before[i] = u
				} else {
					peak[i] = peak[i].Max(u)
				}
				end[i] = u
			}
		}
	})
	time.Sleep(time.Until(start.Add(lead)))
	clear := f.apply(t, sides)
	ticks := make([]uint64, len(sides))
	for i, s := range sides {
		if s.redis != nil {
			ticks[i] = cpuTicks(s.redis.Pid())
		}
	}
	time.Sleep(time.Until(start.Add(lead + d)))
	for i, s := range sides {
		if s.redis == nil {
			continue
		}
		if now := cpuTicks(s.redis.Pid()); now > 0 && ticks[i] > 0 {
			ticks[i] = now - ticks[i]
		} else {
			ticks[i] = 0
		}
	}
	clear()
	wg.Wait()
	close(stop)
	sampler.Wait()

	var rs []Result
	for i, s := range sides {
		c := calls[i]
		r := Result{Fault: f.name, Server: s.srv.Name, Rate: load.Rate,
			Before: Summarize(c, 0, lead, load.Deadline), During: Summarize(c, lead, lead+d, load.Deadline),
			After: Summarize(c, lead+d, total, load.Deadline), OverAdmitted: OverAdmitted(c, 0),
			Timeline: Timeline(c, total, 250*time.Millisecond)}
		median := max(20*time.Millisecond, time.Duration(2*r.Before.P50ms*float64(time.Millisecond)))
		if back, ok := BackToNormal(c, lead+d, total, Normal{Bin: 250 * time.Millisecond, Median: median}); ok {
			r.BackToNormal = back.Seconds()
		} else {
			r.BackToNormal = -1
		}
		r.BreakerOpened = s.srv.LogCount(logAt[i], "redis circuit breaker open")
		if decided := r.During.Kinds[OK.String()] + r.During.Kinds[OverLimit.String()]; ticks[i] > 0 && decided > 0 {
			r.RedisCPUus = float64(ticks[i]) * 1e4 / float64(decided) // 100 ticks a second
		}
		if s.srv.Metrics != "" {
			r.UsageBefore, r.UsagePeak, r.UsageEnd = before[i], peak[i], end[i]
		}
		rs = append(rs, r)
	}
	return rs
}

// exhaust drives the hot value over its limit before the run, so that every
// OK on it during the run is an admission beyond the limit. A server still
// recovering from the previous fault (its failure mode answering) gets a few
// more tries, a second apart.
func exhaust(t *testing.T, s *side, load Load, hot string) {
	l := load
	l.HotValue, l.HotEvery, l.Rate = hot, 1, 1000
	sent := 0
	for try := range 5 {
		if try > 0 {
			time.Sleep(time.Second)
		}
		calls := l.Run(t.Context(), s.conn, time.Now(), time.Duration(HotLimit+10)*time.Millisecond)
		sent += len(calls)
		for _, c := range calls {
			if c.Kind == OverLimit {
				return
			}
		}
	}
	t.Fatalf("%s: %d calls on hot=%s, none OVER_LIMIT: the key is not over its limit of %d", s.srv.Name, sent, hot, HotLimit)
}

// checkPromises holds the sidecar to what docs/reliability.md says it does
// under each fault of the short run.
func checkPromises(t *testing.T, f fault, r Result) {
	t.Helper()
	if r.BackToNormal < 0 {
		t.Errorf("%s: not back to normal within %v after the fault", f.name, *phase)
	}
	if n := r.During.Kinds[OtherError.String()] + r.After.Kinds[OtherError.String()]; n > 0 {
		t.Errorf("%s: %d answers neither a decision, Unavailable nor a deadline", f.name, n)
	}
	if f.name != "redis restarted, data lost" && r.OverAdmitted > 0 {
		t.Errorf("%s: %d calls on a key over its limit were allowed", f.name, r.OverAdmitted)
	}
	if f.name == "latency 10ms" && r.During.WithinDeadline < 0.95 {
		t.Errorf("%s: %.1f%% decided within the client deadline, want 95%% or more: a Redis 10ms away must still decide", f.name, 100*r.During.WithinDeadline)
	}
	if r.UsageEnd.Goroutines > r.UsageBefore.Goroutines+50 {
		t.Errorf("%s: %d goroutines at the end, %d before the fault", f.name, r.UsageEnd.Goroutines, r.UsageBefore.Goroutines)
	}
}

// buildSidecar builds the sidecar into dir, with the race detector when the
// test runs with it (racetest), so the CI runs check the sidecar's races too.
func buildSidecar(t *testing.T, dir string) string {
	bin := filepath.Join(dir, "ratelimit-sidecar")
	cmd := exec.Command("go", racetest.BuildArgs("-tags", "vtprotobuf", "-o", bin, "./cmd/ratelimit-sidecar")...)
	cmd.Dir = filepath.Join("..", "..")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return bin
}

func installReference(t *testing.T, dir string) string {
	bin, err := reftest.Install(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func write(t *testing.T, results []Result, lead, d time.Duration) {
	if err := os.MkdirAll(*out, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(results, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*out, "results.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*out, "tables.md"), []byte(Tables(results)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"blackhole", "latency 10ms"} {
		name := strings.ReplaceAll(f, " ", "-") + ".png"
		if err := Chart(filepath.Join(*out, name), results, f, lead.Seconds(), (lead + d).Seconds()); err != nil {
			t.Logf("chart %s: %v", name, err)
		}
	}
}
