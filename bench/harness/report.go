package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/result"
)

// report is results.json: how the runs were made and every run, plus the medians the table shows.
type report struct {
	Started   string           `json:"started"`
	Machine   machine          `json:"machine"`
	Command   string           `json:"command"`
	Options   map[string]any   `json:"options"`
	StandIn   bool             `json:"stand_in,omitempty"` // sidecar scenarios ran against the no-op server
	ClockTick float64          `json:"clock_ticks_per_s"`
	Scenarios []scenario       `json:"scenarios"`
	Runs      []runResult      `json:"runs"`
	Summary   []scenarioResult `json:"summary"`
}

type machine struct {
	CPU    string `json:"cpu"`
	NProc  int    `json:"nproc"`
	Kernel string `json:"kernel"`
	Go     string `json:"go"`
	Redis  string `json:"redis"`
}

// scenarioResult is a scenario and the medians over its successful runs.
type scenarioResult struct {
	scenario
	result.Summary
}

func opt(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

func val(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

func (r *report) summarize() {
	r.Summary = nil
	for _, sc := range r.Scenarios {
		s := scenarioResult{scenario: sc}
		byCmd := map[string][]float64{}
		var dec, p50, p99, p999, srv, lg, rcpu, rcmd, rt, rbytes, sio, rssB, rssE, memB, memE []float64
		mib := func(b uint64) float64 {
			if b == 0 {
				return math.NaN()
			}
			return float64(b) / (1 << 20)
		}
		for _, run := range r.Runs {
			if run.Scenario != sc.Name {
				continue
			}
			s.Runs++
			if run.Error != "" || run.Load == nil {
				s.Failed++
				continue
			}
			l := run.Load
			s.Errors += l.Errors
			s.OK += l.OK
			s.OverLimit += l.OverLimit
			dec = append(dec, l.DecisionsPerS)
			p50 = append(p50, l.P50Us)
			p99 = append(p99, l.P99Us)
			p999 = append(p999, l.P999Us)
			srv = append(srv, val(run.ServerCPUUsPerDecision))
			lg = append(lg, val(run.LoadgenCPUUsPerDecision))
			rcpu = append(rcpu, val(run.RedisCPUUsPerDecision))
			rcmd = append(rcmd, val(run.RedisCmdsPerDecision))
			rt = append(rt, val(run.RoundTripsPerDecision))
			rbytes = append(rbytes, val(run.RedisBytesPerDecision))
			sio = append(sio, val(run.ServerIOBytesPerDecision))
			rssB = append(rssB, mib(run.ServerRSSBefore))
			rssE = append(rssE, mib(run.ServerRSSEnd))
			memB = append(memB, mib(run.RedisMemoryBefore))
			memE = append(memE, mib(run.RedisMemoryEnd))
			if l.Calls > 0 {
				for name, n := range run.RedisCommands {
					byCmd[name] = append(byCmd[name], float64(n)/float64(l.Calls))
				}
			}
		}
		for name, xs := range byCmd {
			// A command missing from some runs made no calls in them.
			xs = append(xs, make([]float64, len(dec)-len(xs))...)
			if s.ByCommand == nil {
				s.ByCommand = map[string]float64{}
			}
			s.ByCommand[name] = median(xs)
		}
		s.PerRun = dec
		s.Decisions, s.P50Us, s.P99Us, s.P999Us = opt(median(dec)), opt(median(p50)), opt(median(p99)), opt(median(p999))
		if len(dec) > 0 {
			lo, hi := dec[0], dec[0]
			for _, d := range dec {
				lo, hi = min(lo, d), max(hi, d)
			}
			s.DecMin, s.DecMax = opt(lo), opt(hi)
		}
		s.ServerCPU, s.LoadgenCPU = opt(median(srv)), opt(median(lg))
		s.RedisCPU, s.RedisCmds, s.RoundTrips = opt(median(rcpu)), opt(median(rcmd)), opt(median(rt))
		s.RedisBytes, s.ServerIO = opt(median(rbytes)), opt(median(sio))
		s.RSSBefore, s.RSSEnd = opt(median(rssB)), opt(median(rssE))
		s.RedisMemB, s.RedisMemE = opt(median(memB)), opt(median(memE))
		s.KeySpace = summarizeKeySpace(r.Runs, sc.Name)
		s.RLQS = summarizeRLQS(r.Runs, sc.Name)
		r.Summary = append(r.Summary, s)
	}
}

func (r *report) noop() *scenarioResult {
	for i := range r.Summary {
		if r.Summary[i].Name == "noop" {
			return &r.Summary[i]
		}
	}
	return nil
}

// table renders the medians as a Markdown table, with throughput and p99 as ratios to the no-op server.
func (r *report) table() string {
	var sb strings.Builder
	n := r.noop()
	ratio := func(x, base *float64) string {
		if x == nil || base == nil || *base == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f×", *x / *base)
	}
	f := func(p *float64, prec int) string { return fmtOpt(p, prec) }
	fmt.Fprintln(&sb, "| scenario | decisions/s | vs noop | p50 µs | p99 µs | p99 vs noop | p99.9 µs | server CPU µs/decision | Redis CPU µs/decision | Redis commands/decision | round trips/decision | Redis bytes/decision | server RSS MiB (end) | errors (all runs) |")
	fmt.Fprintln(&sb, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, s := range r.Summary {
		var nd, np *float64
		if n != nil {
			nd, np = n.Decisions, n.P99Us
		}
		label := s.Label
		if s.Failed > 0 {
			label += fmt.Sprintf(" (%d of %d runs failed)", s.Failed, s.Runs)
		}
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n",
			label, f(s.Decisions, 0), ratio(s.Decisions, nd), f(s.P50Us, 0), f(s.P99Us, 0), ratio(s.P99Us, np),
			f(s.P999Us, 0), f(s.ServerCPU, 1), f(s.RedisCPU, 1), f(s.RedisCmds, 2), f(s.RoundTrips, 2),
			f(s.RedisBytes, 0), f(s.RSSEnd, 1), s.Errors)
	}
	fmt.Fprintln(&sb)
	fmt.Fprintf(&sb, "Medians of %v run(s) per scenario; %s measured after %s warm-up, %s calls in flight over %s gRPC connection(s).\n",
		r.Options["runs"], r.Options["duration"], r.Options["warmup"], fmt.Sprint(r.Options["c"]), fmt.Sprint(r.Options["conns"]))
	for _, s := range r.Summary {
		if s.Name == "d" && (s.RedisMemE != nil || s.RSSEnd != nil) {
			fmt.Fprintf(&sb, "Scenario (d) growth: Redis used_memory %s → %s MiB, sidecar RSS %s → %s MiB.\n",
				f(s.RedisMemB, 1), f(s.RedisMemE, 1), f(s.RSSBefore, 1), f(s.RSSEnd, 1))
		}
		if s.KeySpace != nil {
			sb.WriteString(keySpaceNote(s.KeySpace, s.Label))
		}
		if s.RLQS != nil {
			sb.WriteString(rlqsNote(s.Label, s.RLQS))
		}
		if len(s.ByCommand) > 0 {
			names := slices.Sorted(maps.Keys(s.ByCommand))
			var parts []string
			for _, name := range names {
				parts = append(parts, name+" "+perDecision(s.ByCommand[name]))
			}
			fmt.Fprintf(&sb, "Redis calls per decision, %s: %s.\n", s.Label, strings.Join(parts, ", "))
		}
		if s.Name == "b" && s.Decisions != nil && s.OK+s.OverLimit > 0 { // ghz does not tell them apart
			fmt.Fprintf(&sb, "Scenario (b) answers: %d OK, %d OVER_LIMIT.\n", s.OK, s.OverLimit)
		}
	}
	for _, s := range r.Summary {
		if s.LoadgenCPU != nil {
			fmt.Fprintf(&sb, "Load generator CPU per decision (shares the cores): %s.\n", r.loadgenCPUs())
			break
		}
	}
	if r.StandIn {
		fmt.Fprintln(&sb, "\n**Stand-in run: the sidecar scenarios were served by the no-op server; these are not sidecar figures.**")
	}
	return sb.String()
}

func (r *report) loadgenCPUs() string {
	var parts []string
	for _, s := range r.Summary {
		parts = append(parts, fmt.Sprintf("%s %s µs", s.Name, fmtOpt(s.LoadgenCPU, 1)))
	}
	return strings.Join(parts, ", ")
}

func (r *report) write(o options) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, "table.md"), []byte(r.table()), 0o644); err != nil {
		return err
	}
	return r.chart(filepath.Join(o.out, "benchmarks.png"))
}

// publish writes docs/benchmarks.md and copies the chart next to it.
func (r *report) publish(o options) error {
	if err := os.MkdirAll(o.docs, 0o755); err != nil {
		return err
	}
	png, err := os.ReadFile(filepath.Join(o.out, "benchmarks.png"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.docs, o.docName()+".png"), png, 0o644); err != nil {
		return err
	}
	page := filepath.Join(o.docs, o.docName()+".md")
	old, err := os.ReadFile(page)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.WriteFile(page, []byte(spliceGenerated(string(old), r.markdown(o.docName()+".png"))), 0o644)
}

// The page -publish writes may go on past its generated part with text
// written by hand, which a rerun keeps: the generated part runs from the
// page's start to generatedEnd.
const (
	generatedStart = "<!-- The part from here to \"end of generated part\" is written by `go run ./bench/harness -publish`. -->\n"
	generatedEnd   = "<!-- end of generated part -->\n"
)

// spliceGenerated returns the page with gen as its generated part and
// whatever old had after its generated part; an old page without the end
// marker is replaced whole.
func spliceGenerated(old, gen string) string {
	page := generatedStart + gen
	if !strings.HasSuffix(page, "\n") {
		page += "\n"
	}
	page += generatedEnd
	if _, rest, ok := strings.Cut(old, generatedEnd); ok {
		page += rest
	}
	return page
}

func (r *report) markdown(png string) string {
	var sb strings.Builder
	m := r.Machine
	fmt.Fprintf(&sb, `# Benchmarks

What one ratelimit-sidecar decision costs, next to a gRPC server that does nothing (the ceiling on this machine),
all on loopback. Generated by `+"`%s`"+` on %s; do not edit by hand, rerun with `+"`-publish`"+`.

## Machine

- CPU: %s, %d cores (nproc); load generator, server and Redis share them
- Kernel: %s
- Go: %s
- Redis: %s

## How it was run

`+"```"+`
%s
`+"```"+`

The harness builds the sidecar, `+"`bench/noop`"+` and `+"`bench/loadgen`"+`, starts its own redis-server
(`+"`--save \"\" --appendonly no`"+`), and runs the scenarios in turn, repeating the whole list so that any
drift in machine speed hits every scenario alike. Each run gets a fresh server process and an empty Redis (FLUSHDB).
`+engineNote(r.Options["engine"])+referenceNote(r.Scenarios)+`

Commands of the last repetition (`+"`$BIN`"+` is the harness's build directory, ports are picked free):

`+"```"+`
`, r.Command, r.Started, m.CPU, m.NProc, m.Kernel, m.Go, m.Redis, r.Command)
	for _, sc := range r.Scenarios {
		var last *runResult
		for i := range r.Runs {
			if r.Runs[i].Scenario == sc.Name {
				last = &r.Runs[i]
			}
		}
		if last == nil {
			continue
		}
		fmt.Fprintf(&sb, "# %s\n", sc.Label)
		if last.ServerCmd != "" {
			fmt.Fprintf(&sb, "%s &\n", last.ServerCmd)
		}
		fmt.Fprintf(&sb, "%s\n", last.LoadgenCmd)
	}
	fmt.Fprint(&sb, "```\n\n## Results\n\n")
	fmt.Fprint(&sb, r.table())
	fmt.Fprint(&sb, `
![decisions per second and latency per scenario](`+png+`)

## What each figure is measured from

- **decisions/s**: ShouldRateLimit calls answered without error that started and ended inside the measured
  interval, divided by its length (bench/loadgen). One call is one decision, whatever its number of descriptors.
- **p50, p99, p99.9**: per-call latency seen by the load generator (client side, so gRPC and loopback included),
  from a log-linear histogram accurate to 1/128 of the value, never under-reporting.
- **vs noop**: the scenario's median over the no-op server's median.
- **server CPU µs/decision**: change in utime+stime of the server process (/proc/PID/stat, in clock ticks of
  `+"`getconf CLK_TCK`"+`) between the load generator's start and end marks, over the decisions counted.
- **Redis CPU µs/decision**: change in INFO `+"`used_cpu_sys + used_cpu_user`"+` over the same interval.
- **Redis commands/decision**: change in the `+"`calls`"+` of every INFO commandstats entry but `+"`info`"+` (the harness's own).
  Commands run by a Lua script are counted by Redis as well as the EVALSHA that ran them.
- **Redis bytes/decision**: change in INFO `+"`total_net_input_bytes + total_net_output_bytes`"+`, what Redis
  read from and wrote to its clients (the store's traffic on the wire, RESP framing included). results.json also
  has each server's `+"`server_io_bytes_per_decision`"+`: its rchar + wchar from /proc/PID/io, gRPC and Redis together.
- For scenario cl, every Redis figure is the sum over the cluster's three masters.
- **round trips/decision**: change in the sidecar's `+"`"+roundTripsMetric+"`"+` on /metrics; n/a when it does not export it.
- **server RSS**: VmRSS from /proc/PID/status at the end mark.
- **Load generator CPU** is measured the same way as the server's; with `+"`-engine ghz`"+`, ghz's whole-process CPU is
  added (see How it was run). On a small machine the generator, the server
  and Redis share the cores, so decisions/s is bounded by their CPU per decision added up; the server's CPU per
  decision is the figure that carries over to other machines.
- A sidecar whose store call fails or times out applies the rule's failure mode: allow and deny still answer
  OK or OVER_LIMIT, but error (the default, and the bench rules') answers Unavailable, which counts in the
  errors column. The sidecar's logs in the harness's logs/ directory say why.

Every figure but the errors (summed over all runs) is the median of the runs; "vs noop" is the scenario's median
over the no-op's. results.json in the harness's output directory has each run.
`)
	return sb.String()
}

// referenceNote says how scenario ref ran envoyproxy/ratelimit, when it is in the list.
func referenceNote(scenarios []scenario) string {
	if !slices.ContainsFunc(scenarios, func(sc scenario) bool { return sc.Server == "reference" }) {
		return ""
	}
	return "\nScenario ref is envoyproxy/ratelimit, the server the sidecar replaces, built with `go install " + referencePkg +
		"` (the newest commit the Go module proxy serves), under the same load as (a), with the same rules and " +
		"the same Redis. It runs with its defaults (no Redis pipelining, a pool of 10 Redis connections, no " +
		"rate-limit response headers) except for what a loopback run needs: Redis over TCP, free ports on " +
		"127.0.0.1, the rules read once, and Prometheus metrics in place of statsd. It exports no round-trip " +
		"count, so that column is n/a; its Redis commands are counted like the sidecar's.\n"
}

// engineNote says who sent the calls.
func engineNote(engine any) string {
	if engine == "ghz" {
		return "\nThe calls were sent by ghz " + ghzVersion + " (`-engine ghz`): `bench/loadgen -engine ghz` gives it the same " +
			"requests, round-robin, as a JSON array, runs it once for the warm-up and once for the measured interval, " +
			"and computes the latencies from its per-call report. That report holds no response contents, so OK and " +
			"OVER_LIMIT are not told apart. The marks, and so the server's and Redis's samples, bracket ghz's measured " +
			"interval; ghz's own CPU, which bench/loadgen reports, is added to the load generator's, and includes its " +
			"start-up and the writing of its report.\n"
	}
	return "\nThe calls were sent by `bench/loadgen`, which sends prebuilt request bytes and scans responses for two fields, " +
		"so that as much of the machine as possible is left to the server.\n"
}

// machineInfo describes where the run happened, for the published page.
func machineInfo(ctx context.Context, redisServer string) machine {
	m := machine{NProc: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	cmdOut := func(name string, args ...string) string {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, name, args...).Output()
		if err != nil {
			return "unknown"
		}
		return strings.TrimSpace(string(out))
	}
	if v := cmdOut("go", "version"); v != "unknown" {
		m.Go = v
	}
	m.Redis = cmdOut(redisServer, "--version")
	if n := cmdOut("nproc"); n != "unknown" {
		fmt.Sscan(n, &m.NProc)
	}
	return m
}

func optionsJSON(o options) map[string]any {
	return map[string]any{
		"duration": o.duration.String(), "warmup": o.warmup.String(), "runs": o.runs, "c": o.c, "conns": o.conns,
		"keys": o.keys, "distinct_keys": o.distinctKeys, "timeout": o.timeout.String(), "scenarios": o.scenarios,
		"target": o.target, "target_scenario": o.targetScenario, "stand_in": o.standIn, "engine": o.engine,
	}
}

// perDecision formats a small per-decision rate: three significant digits, and "<0.001" for the odd background
// command (a health check's PING) rather than an exponent.
func perDecision(x float64) string {
	if x > 0 && x < 0.001 {
		return "<0.001"
	}
	return strconv.FormatFloat(x, 'g', 3, 64)
}
