package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/local"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/result"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/proctest"
)

// roundTripsMetric is the sidecar's counter of store round trips (one per pipeline or script call).
const roundTripsMetric = "ratelimit_store_round_trips_total"

// runResult is one scenario run. Per-decision figures divide a counter's change over the measured interval by
// the calls the load generator counted in that interval. Pointers are nil when the figure was not measurable.
type runResult struct {
	Scenario string       `json:"scenario"`
	Run      int          `json:"run"`
	Error    string       `json:"error,omitempty"`
	Load     *result.Load `json:"load,omitempty"`

	ServerCPUUsPerDecision  *float64 `json:"server_cpu_us_per_decision"`
	LoadgenCPUUsPerDecision *float64 `json:"loadgen_cpu_us_per_decision"`
	RedisCPUUsPerDecision   *float64 `json:"redis_cpu_us_per_decision"`
	RedisCmdsPerDecision    *float64 `json:"redis_commands_per_decision"`
	RoundTripsPerDecision   *float64 `json:"round_trips_per_decision"`
	// RedisBytesPerDecision is what Redis read and wrote on its client connections (INFO total_net_input_bytes
	// plus total_net_output_bytes, over all its processes): the store's traffic on the wire.
	RedisBytesPerDecision *float64 `json:"redis_bytes_per_decision"`
	// ServerIOBytesPerDecision is the server's rchar plus wchar (/proc/PID/io): every byte it read or wrote
	// through a system call, its gRPC and Redis connections alike.
	ServerIOBytesPerDecision *float64 `json:"server_io_bytes_per_decision"`

	RedisCommands     map[string]uint64 `json:"redis_commands,omitempty"` // calls per command in the interval
	ServerRSSBefore   uint64            `json:"server_rss_bytes_before,omitempty"`
	ServerRSSEnd      uint64            `json:"server_rss_bytes_end,omitempty"`
	RedisMemoryBefore uint64            `json:"redis_used_memory_before,omitempty"`
	RedisMemoryEnd    uint64            `json:"redis_used_memory_end,omitempty"`
	KeySpace          *keySpace         `json:"key_space,omitempty"` // scenarios million and million-sliding
	// RLQS is scenario rlqs's per-usage figures; its per-decision ones are per usage report.
	RLQS *rlqsRun `json:"rlqs,omitempty"`

	// StoreErrors and RLQSRefused are the sidecar's failed store calls and refused RLQS usages in the
	// interval (from its metrics): a run with either did not measure the path it meant to.
	StoreErrors uint64 `json:"store_errors,omitempty"`
	RLQSRefused uint64 `json:"rlqs_refused,omitempty"`

	ServerCmd  string `json:"server_cmd,omitempty"`
	LoadgenCmd string `json:"loadgen_cmd"`
}

func (r runResult) line(runs int) string {
	if r.Error != "" {
		return fmt.Sprintf("run %d/%d %-6s FAILED: %s", r.Run, runs, r.Scenario, r.Error)
	}
	l := r.Load
	line := fmt.Sprintf("run %d/%d %-6s %8.0f decisions/s  p50 %6.0fµs  p99 %6.0fµs  p99.9 %6.0fµs  server %s µs/dec  redis %s µs/dec  errors %d",
		r.Run, runs, r.Scenario, l.DecisionsPerS, l.P50Us, l.P99Us, l.P999Us,
		fmtOpt(r.ServerCPUUsPerDecision, 1), fmtOpt(r.RedisCPUUsPerDecision, 1), l.Errors)
	if r.StoreErrors > 0 || r.RLQSRefused > 0 {
		line += fmt.Sprintf("  store errors %d  RLQS usages refused %d", r.StoreErrors, r.RLQSRefused)
	}
	if q := r.RLQS; q != nil {
		line += fmt.Sprintf("  | per usage: server %s µs, redis %s µs, %s cmds; %d windows",
			fmtOpt(q.ServerCPUUsPerUsage, 1), fmtOpt(q.RedisCPUUsPerUsage, 1), fmtOpt(q.RedisCmdsPerUsage, 2), q.Windows)
		if q.Windows > 0 {
			line += fmt.Sprintf(", admitted/limit %.3f–%.3f", q.FillMin, 1+q.EpsilonMax)
		}
	}
	return line
}

// sample is the state of the counters at one instant.
type sample struct {
	serverTicks, loadgenTicks uint64
	haveServer, haveLoadgen   bool
	serverRSS                 uint64
	serverIO                  uint64 // rchar + wchar
	haveServerIO              bool
	redis                     *redisInfo
	roundTrips                float64
	haveRoundTrips            bool
	storeErrors, rlqsRefused  float64 // the sidecar's ratelimit_store_errors_total and ratelimit_rlqs_refused_total
}

// target is the server a run loads and where to sample it.
type target struct {
	addr       string
	domain     string
	pid        int    // 0: not measured
	metricsURL string // "" when it has none the harness knows of
	cmd        string
	stop       func()
}

func (b *bench) runOne(ctx context.Context, sc scenario, run int) (rr runResult) {
	rr = runResult{Scenario: sc.Name, Run: run}
	fail := func(err error) runResult {
		rr.Error = err.Error()
		return rr
	}
	log, err := os.Create(filepath.Join(b.logs, fmt.Sprintf("%s-run%d.log", sc.Name, run)))
	if err != nil {
		return fail(err)
	}
	defer log.Close()

	// Every run starts from an empty Redis, including those that do not use it, so they all look alike.
	if err := b.allRedis().flush(ctx); err != nil {
		return fail(err)
	}
	t, err := b.startServer(ctx, sc, log)
	if err != nil {
		return fail(err)
	}
	defer t.stop()
	rr.ServerCmd = t.cmd

	bin, args := b.loadgen, b.loadgenArgs(sc, t)
	if sc.Load == rlqsLoad {
		bin, args = b.rlqsload, b.o.rlqs.args(b.o, t)
	}
	rr.LoadgenCmd = b.display(bin, args...)
	snap := b.sampler(ctx, t, b.redisOf(sc), log)
	var ks *keySpaceProbe
	if sc.Load == keySpaceLoad && t.pid != 0 {
		ks = probeKeySpace(ctx, t.pid)
		defer ks.stop()
		snap = ks.marking(snap)
	}
	pre := snap(nil)
	l, start, end, err := b.load(ctx, bin, args, log, snap)
	if err != nil {
		return fail(err)
	}
	rr.Load = l
	rr.figures(l, pre, start, end, b.ticks)
	rr.RLQS = rr.rlqsFigures(l)
	if ks != nil {
		rr.KeySpace = ks.result(ctx, b.redisOf(sc), b.o.millionKeys, pre, log)
	}
	return rr
}

// loadgenArgs returns the load generator's arguments for scenario sc against t.
func (b *bench) loadgenArgs(sc scenario, t target) []string {
	keys := b.o.keys
	loadScenario := sc.Load
	if sc.Server == "target" {
		loadScenario = b.o.targetScenario
	}
	var lap []string
	switch loadScenario {
	case "distinct":
		keys = b.o.distinctKeys
	case keySpaceLoad:
		keys, lap = b.o.millionKeys, []string{"-warmup-lap"}
	}
	args := []string{"-addr", t.addr, "-domain", t.domain, "-scenario", loadScenario, "-keys", strconv.Itoa(keys),
		"-c", strconv.Itoa(b.o.c), "-conns", strconv.Itoa(b.o.conns), "-duration", b.o.duration.String(),
		"-warmup", b.o.warmup.String(), "-timeout", b.o.timeout.String(), "-json", "-marks"}
	args = append(args, lap...)
	if b.o.engine == "ghz" {
		args = append(args, "-engine", "ghz", "-ghz", b.ghz)
	}
	return args
}

// sampler returns a function that samples the counters of t, of the load generator lg when not nil, and of
// the Redis processes nodes (none when empty).
func (b *bench) sampler(ctx context.Context, t target, nodes redisNodes, log io.Writer) func(lg *proctest.Process) sample {
	return func(lg *proctest.Process) sample {
		var s sample
		if t.pid != 0 {
			if v, err := local.CPUTicks(t.pid); err == nil {
				s.serverTicks, s.haveServer = v, true
			}
			s.serverRSS, _ = rss(t.pid)
			if v, err := ioBytes(t.pid); err == nil {
				s.serverIO, s.haveServerIO = v, true
			}
		}
		if lg != nil {
			if v, err := local.CPUTicks(lg.Pid()); err == nil {
				s.loadgenTicks, s.haveLoadgen = v, true
			}
		}
		if len(nodes) > 0 {
			if info, err := nodes.info(ctx); err == nil {
				s.redis = &info
			} else {
				fmt.Fprintln(log, "harness:", err)
			}
		}
		if t.metricsURL != "" {
			if body, err := local.Get(ctx, t.metricsURL); err == nil {
				s.roundTrips, s.haveRoundTrips = sumMetric(body, roundTripsMetric)
				s.storeErrors, _ = sumMetric(body, "ratelimit_store_errors_total")
				s.rlqsRefused, _ = sumMetric(body, "ratelimit_rlqs_refused_total")
			}
		}
		return s
	}
}

// load runs the load generator bin (bench/loadgen or bench/rlqsload) with args, samples the counters with snap at its "mark start" and "mark end"
// lines (the measured interval), and returns its report and the two samples. Its other stderr lines go to log.
func (b *bench) load(ctx context.Context, bin string, args []string, log io.Writer, snap func(*proctest.Process) sample) (
	l *result.Load, start, end sample, err error) {
	var stdout bytes.Buffer
	stderrR, stderrW := io.Pipe()
	lg, err := startProc(filepath.Base(bin), stderrW, &stdout, nil, bin, args...)
	if err != nil {
		return nil, start, end, err
	}
	defer func() { _ = lg.Stop(2 * time.Second) }()
	marks := make(chan string, 2)
	var tail strings.Builder // loadgen's other stderr lines, for the error message; read after readerDone
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		sc := bufio.NewScanner(stderrR)
		for sc.Scan() {
			switch line := sc.Text(); line {
			case "mark start", "mark end":
				marks <- line
			default:
				fmt.Fprintln(log, "loadgen:", line)
				if tail.Len() < 2000 {
					tail.WriteString(line + "\n")
				}
			}
		}
		close(marks)
	}()
	go func() { <-lg.Done(); stderrW.Close() }()

	for want := range 2 {
		select {
		case m, ok := <-marks:
			if !ok {
				<-readerDone
				return nil, start, end, fmt.Errorf("loadgen exited early (%v): %s", lg.Wait(), strings.TrimSpace(tail.String()))
			}
			if (want == 0) != (m == "mark start") {
				return nil, start, end, fmt.Errorf("loadgen: %q out of order", m)
			}
			if want == 0 {
				start = snap(lg)
			} else {
				end = snap(lg)
			}
		case <-ctx.Done():
			return nil, start, end, ctx.Err()
		}
	}
	select {
	case <-lg.Done():
	case <-ctx.Done():
		return nil, start, end, ctx.Err()
	}
	<-readerDone
	if err := lg.Wait(); err != nil {
		return nil, start, end, fmt.Errorf("loadgen: %v: %s", err, strings.TrimSpace(tail.String()))
	}
	l = &result.Load{}
	if err := json.Unmarshal(stdout.Bytes(), l); err != nil {
		return nil, start, end, fmt.Errorf("loadgen output: %w", err)
	}
	return l, start, end, nil
}

// figures sets rr's per-decision figures from the samples before the run (pre) and at the start and end of
// its measured interval, in which l counted its calls; ticks is USER_HZ.
func (rr *runResult) figures(l *result.Load, pre, start, end sample, ticks float64) {
	decisions := float64(l.Calls)
	perDecision := func(delta float64) *float64 {
		if decisions == 0 {
			return nil
		}
		v := delta / decisions
		return &v
	}
	if start.haveServer && end.haveServer {
		rr.ServerCPUUsPerDecision = perDecision(float64(end.serverTicks-start.serverTicks) / ticks * 1e6)
	}
	if start.haveLoadgen && end.haveLoadgen {
		rr.LoadgenCPUUsPerDecision = perDecision((float64(end.loadgenTicks-start.loadgenTicks)/ticks + l.ChildCPUS) * 1e6)
	}
	rr.ServerRSSBefore, rr.ServerRSSEnd = pre.serverRSS, end.serverRSS
	if start.haveServerIO && end.haveServerIO {
		rr.ServerIOBytesPerDecision = perDecision(float64(end.serverIO - start.serverIO))
	}
	if start.redis != nil && end.redis != nil {
		rr.RedisCPUUsPerDecision = perDecision((end.redis.cpuSeconds - start.redis.cpuSeconds) * 1e6)
		var sum uint64
		rr.RedisCommands, sum = commandDelta(start.redis.calls, end.redis.calls, "info")
		rr.RedisCmdsPerDecision = perDecision(float64(sum))
		rr.RedisBytesPerDecision = perDecision(float64(end.redis.netBytes - start.redis.netBytes))
	}
	if pre.redis != nil && end.redis != nil {
		rr.RedisMemoryBefore, rr.RedisMemoryEnd = pre.redis.usedMemory, end.redis.usedMemory
	}
	if start.haveRoundTrips && end.haveRoundTrips {
		rr.RoundTripsPerDecision = perDecision(end.roundTrips - start.roundTrips)
		rr.StoreErrors = uint64(end.storeErrors - start.storeErrors)
		rr.RLQSRefused = uint64(end.rlqsRefused - start.rlqsRefused)
	}
}

// startServer starts the server sc loads and waits until it serves.
func (b *bench) startServer(ctx context.Context, sc scenario, log io.Writer) (target, error) {
	server := sc.Server
	if (server == "sidecar" || server == "reference") && b.o.standIn {
		server = "noop"
	}
	switch server {
	case "target":
		return target{addr: b.o.target, domain: b.o.targetDomain, pid: b.o.targetPID, stop: func() {}}, nil

	case "noop":
		args := []string{"-addr", "127.0.0.1:0"}
		pr, pw := io.Pipe()
		p, err := startProc("noop", log, pw, nil, b.noop, args...)
		if err != nil {
			return target{}, err
		}
		go func() { <-p.Done(); pw.Close() }()
		addr, err := waitListening(ctx, p, pr, log, 10*time.Second)
		if err != nil {
			_ = p.Stop(2 * time.Second)
			return target{}, err
		}
		return target{addr: addr, domain: "bench", pid: p.Pid(), cmd: b.display(b.noop, args...),
			stop: func() { _ = p.Stop(5 * time.Second) }}, nil

	case "sidecar":
		ports, err := proctest.FreePorts(2)
		if err != nil {
			return target{}, err
		}
		grpcAddr, httpAddr := local.Addr(ports[0]), local.Addr(ports[1])
		rules, err := b.rulesFor(sc)
		if err != nil {
			return target{}, err
		}
		args := []string{"-config", rules, "-grpc-addr", grpcAddr, "-http-addr", httpAddr}
		switch sc.Store {
		case "redis":
			args = append(args, "-redis-url", b.redis.URL())
		case "cluster":
			args = append(args, "-redis-mode", "cluster", "-redis-addrs", strings.Join(b.cluster.addrs(), ","))
		default:
			args = append(args, "-redis-url", "")
		}
		args = append(args, "-key-prefix", "bench:")
		args = append(args, sc.Args...)
		t, err := b.startReady(ctx, log, "ratelimit-sidecar", nil, b.sidecar, args, "http://"+httpAddr+"/readyz")
		t.addr, t.metricsURL = grpcAddr, "http://"+httpAddr+"/metrics"
		return t, err

	case "reference":
		return b.startReference(ctx, log)
	}
	return target{}, fmt.Errorf("scenario %s: unknown server %q", sc.Name, server)
}

// display renders a command line for the report, with the temporary directory as $BIN so that no path of this
// machine ends up in a committed document.
func (b *bench) display(bin string, args ...string) string {
	parts := []string{bin}
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \"'") {
			a = strconv.Quote(a)
		}
		parts = append(parts, a)
	}
	return b.sanitize(strings.Join(parts, " "))
}

// sanitize replaces the build directory with $BIN and makes paths under the module root relative.
func (b *bench) sanitize(s string) string {
	if b.tmp != "" {
		s = strings.ReplaceAll(s, b.tmp, "$BIN")
	}
	if b.root != "" {
		s = strings.ReplaceAll(s, b.root+string(os.PathSeparator), "")
	}
	return s
}

func fmtOpt(v *float64, prec int) string {
	if v == nil || math.IsNaN(*v) {
		return "n/a"
	}
	return strconv.FormatFloat(*v, 'f', prec, 64)
}

// startReady starts a server that answers 200 on readyURL once it serves, waits for that, and returns it as a
// target of domain bench without its address.
func (b *bench) startReady(ctx context.Context, log io.Writer, name string, env []string, bin string, args []string,
	readyURL string) (target, error) {
	p, err := startProc(name, log, nil, env, bin, args...)
	if err != nil {
		return target{}, err
	}
	if err := waitReady(ctx, p, readyURL, 30*time.Second); err != nil {
		_ = p.Stop(2 * time.Second)
		return target{}, err
	}
	cmd := b.display(bin, args...)
	if len(env) > 0 {
		cmd = b.sanitize(strings.Join(env, " ")) + " " + cmd
	}
	return target{domain: "bench", pid: p.Pid(), cmd: cmd, stop: func() { _ = p.Stop(10 * time.Second) }}, nil
}

// startReference starts envoyproxy/ratelimit on the harness's Redis with the bench rules (in b.referenceRoot,
// see build), configured as its image runs by default (no Redis pipelining, a pool of 10 connections,
// per-request limit checks) except for what a loopback run needs: TCP to Redis, free ports on 127.0.0.1, rules
// read once, and Prometheus metrics instead of statsd (the sidecar's own metrics are Prometheus too). Its
// /healthcheck answers 200 once it serves.
func (b *bench) startReference(ctx context.Context, log io.Writer) (target, error) {
	ports, err := proctest.FreePorts(4)
	if err != nil {
		return target{}, err
	}
	grpcAddr, httpAddr := local.Addr(ports[0]), local.Addr(ports[1])
	env := []string{
		"RUNTIME_ROOT=" + b.referenceRoot, "RUNTIME_SUBDIRECTORY=current", "RUNTIME_APPDIRECTORY=config",
		"RUNTIME_WATCH_ROOT=false", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + b.redis.Addr, "CACHE_KEY_PREFIX=bench:",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(ports[0]),
		"HOST=127.0.0.1", "PORT=" + strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(ports[2]),
		"USE_STATSD=false", "USE_PROMETHEUS=true", "PROMETHEUS_ADDR=" + local.Addr(ports[3]),
		"LOG_LEVEL=warn", "LOG_FORMAT=json",
	}
	t, err := b.startReady(ctx, log, "envoyproxy/ratelimit", env, b.reference, nil, "http://"+httpAddr+"/healthcheck")
	t.addr = grpcAddr
	return t, err
}
