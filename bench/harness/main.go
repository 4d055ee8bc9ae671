// Command harness runs the ratelimit-sidecar benchmarks on loopback and writes their results.
//
// It builds the sidecar, the no-op server and the load generator, starts its own redis-server, and runs each
// scenario -runs times, alternating scenarios within a repetition so that drifts in machine speed hit them all
// alike. Every scenario run gets a fresh server process and an empty Redis. Around the measured interval
// (marked by the load generator) it samples process CPU and RSS from /proc, Redis INFO and the sidecar's /metrics.
//
//	go run ./bench/harness -out bench/out            # results.json, table.md, benchmarks.png
//	go run ./bench/harness -out bench/out -publish   # also docs/benchmarks.md and docs/benchmarks.png
package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "harness:", err)
		os.Exit(1)
	}
}

type options struct {
	out          string
	duration     time.Duration
	warmup       time.Duration
	runs         int
	c            int
	conns        int
	keys         int
	distinctKeys int
	millionKeys  int
	timeout      time.Duration
	scenarios    []string

	target         string
	targetScenario string
	targetDomain   string
	targetPID      int

	sidecar     string
	standIn     bool
	rules       string
	redisServer string

	engine    string
	ghz       string
	reference string

	publish bool
	replot  bool
	docs    string

	rlqs rlqsOptions
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	var scenarios string
	fs := flag.NewFlagSet("harness", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.out, "out", "", "directory for results.json, table.md, benchmarks.png and logs/ (default bench/out, bench/out-ghz with -engine ghz)")
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "measured interval of each run")
	fs.DurationVar(&o.warmup, "warmup", 3*time.Second, "unmeasured load before each measured interval")
	fs.IntVar(&o.runs, "runs", 3, "repetitions of the whole scenario list; figures are medians over them")
	fs.IntVar(&o.c, "c", 50, "load generator concurrency (calls in flight)")
	fs.IntVar(&o.conns, "conns", 1, "load generator gRPC connections")
	fs.IntVar(&o.keys, "keys", 1000, "descriptor values spread over in scenarios noop, a, a-sw, a-tb, a-sl, c, e, f, fn, h, s, cl")
	fs.IntVar(&o.distinctKeys, "distinct-keys", 100000, "values before scenario d repeats one")
	fs.IntVar(&o.millionKeys, "million-keys", 1000000, "live counters of scenarios million and million-sliding (sent once each before the measured interval)")
	fs.DurationVar(&o.timeout, "timeout", time.Second, "deadline of each call")
	fs.StringVar(&scenarios, "scenarios", "noop,a,b,c,d,e,h,cl,ref", "scenarios to run, in order (noop, a to f, fn, h, s, a-sw, a-tb, a-sl, cl, ref, million, million-sliding, rlqs; -target adds target)")
	fs.StringVar(&o.target, "target", "", "also load this external ratelimit.v3 server (host:port or unix:///path)")
	fs.StringVar(&o.targetScenario, "target-scenario", "allowed", "loadgen -scenario for -target")
	fs.StringVar(&o.targetDomain, "target-domain", "bench", "domain sent to -target; its rules must define it")
	fs.IntVar(&o.targetPID, "target-pid", 0, "pid of the -target server, for its CPU and RSS (0: not measured)")
	fs.StringVar(&o.sidecar, "sidecar", "", "prebuilt sidecar binary (default: go build ./cmd/ratelimit-sidecar)")
	fs.BoolVar(&o.standIn, "stand-in", false, "run the sidecar scenarios against the no-op server (tests the harness itself)")
	fs.StringVar(&o.rules, "rules", "", "rules file for the sidecar (default: the bench rules the harness writes)")
	fs.StringVar(&o.redisServer, "redis-server", "redis-server", "redis-server binary")
	fs.StringVar(&o.engine, "engine", "loadgen", "who sends the calls: loadgen (bench/loadgen's own) or ghz ("+ghzVersion+", installed with go install unless -ghz names one)")
	fs.StringVar(&o.ghz, "ghz", "", "prebuilt ghz binary for -engine ghz")
	fs.StringVar(&o.reference, "reference", "", "prebuilt envoyproxy/ratelimit binary for scenario ref (default: go install "+referencePkg+")")
	fs.BoolVar(&o.publish, "publish", false, "also write <docs>/benchmarks.md and <docs>/benchmarks.png (benchmarks-ghz.* with -engine ghz)")
	fs.StringVar(&o.docs, "docs", "docs", "directory -publish writes to")
	o.rlqs.flags(fs)
	fs.BoolVar(&o.replot, "replot", false, "run nothing: rewrite table.md and benchmarks.png (and with -publish the page) from -out's results.json")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var errs []error
	for s := range strings.SplitSeq(scenarios, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if _, ok := scenarioByName(s); !ok || s == "target" {
			errs = append(errs, fmt.Errorf("-scenarios: unknown %q", s))
			continue
		}
		o.scenarios = append(o.scenarios, s)
	}
	if o.target != "" {
		o.scenarios = append(o.scenarios, "target")
	}
	if len(o.scenarios) == 0 {
		errs = append(errs, errors.New("no scenario to run"))
	}
	if o.runs < 1 || o.c < 1 || o.conns < 1 || o.keys < 1 || o.distinctKeys < 1 || o.millionKeys < 1 {
		errs = append(errs, errors.New("-runs, -c, -conns, -keys, -distinct-keys and -million-keys must be at least 1"))
	}
	if o.duration <= 0 || o.warmup < 0 || o.timeout <= 0 {
		errs = append(errs, errors.New("-duration and -timeout must be positive, -warmup not negative"))
	}
	errs = append(errs, o.rlqs.check())
	if o.engine != "loadgen" && o.engine != "ghz" {
		errs = append(errs, fmt.Errorf("-engine %q: want loadgen or ghz", o.engine))
	}
	if o.ghz != "" && o.engine != "ghz" {
		errs = append(errs, errors.New("-ghz is for -engine ghz"))
	}
	if o.out == "" { // each engine's results apart, as its published page
		o.out = filepath.Join("bench", "out")
		if o.engine == "ghz" {
			o.out += "-ghz"
		}
	}
	return o, errors.Join(errs...)
}

// scenario is one row of the results table.
type scenario struct {
	Name   string `json:"name"`
	Label  string `json:"label"`
	Server string `json:"server"` // noop, sidecar, reference (envoyproxy/ratelimit) or target
	Store  string `json:"store"`  // redis, cluster (the harness's 3 masters), memory or "" when the server keeps no counters
	Load   string `json:"load"`   // loadgen -scenario
	// Args are sidecar flags beyond the harness's own.
	Args []string `json:"args,omitempty"`
	// Algorithm, when set, is the rules file's default algorithm (the bench rules' limits use the default).
	Algorithm string `json:"algorithm,omitempty"`
}

var allScenarios = []scenario{
	{"noop", "noop server (ceiling)", "noop", "", "allowed", nil, ""},
	{"a", "(a) allowed, 1 descriptor, Redis", "sidecar", "redis", "allowed", nil, ""},
	{"b", "(b) hot key over limit, Redis", "sidecar", "redis", "hot", nil, ""},
	{"c", "(c) 3 descriptors, Redis", "sidecar", "redis", "three", nil, ""},
	{"d", "(d) distinct keys, Redis", "sidecar", "redis", "distinct", nil, ""},
	{"e", "(e) allowed, in-memory store", "sidecar", "memory", "allowed", nil, ""},
	{"f", "(f) 3 descriptors, one over limit, Redis", "sidecar", "redis", "hotthree", nil, ""},
	{"fn", "(fn) as (f), without the over-limit cache", "sidecar", "redis", "hotthree", []string{"-over-limit-cache=false"}, ""},
	{"h", "(h) hot keys allowed: half the calls on 10 keys, Redis", "sidecar", "redis", "hotallowed", nil, ""},
	{"s", "(s) as (a), sliding window", "sidecar", "redis", "allowed", nil, "sliding_window"},
	{"a-sw", "(a-sw) as (a), sliding window", "sidecar", "redis", "allowed", nil, "sliding_window"},
	{"a-tb", "(a-tb) as (a), token bucket", "sidecar", "redis", "allowed", nil, "token_bucket"},
	{"a-sl", "(a-sl) as (a), sliding log", "sidecar", "redis", "allowed", nil, "sliding_log"},
	{"cl", "(cl) as (a), 3-master Redis Cluster", "sidecar", "cluster", "allowed", nil, ""},
	{"ref", "(ref) envoyproxy/ratelimit, allowed, Redis", "reference", "redis", "allowed", nil, ""},
	{"million", "(million) distinct tenants, hour-long windows, Redis", "sidecar", "redis", keySpaceLoad, nil, ""},
	{"million-sliding", "(million-sliding) as (million), sliding window", "sidecar", "redis", keySpaceLoad, nil, "sliding_window"},
	{"rlqs", "(rlqs) RLQS usage reports from simulated Envoys, Redis", "sidecar", "redis", rlqsLoad, nil, ""},
	{"target", "external server (-target)", "target", "", "", nil, ""},
}

func scenarioByName(name string) (scenario, bool) {
	i := slices.IndexFunc(allScenarios, func(s scenario) bool { return s.Name == name })
	if i < 0 {
		return scenario{}, false
	}
	return allScenarios[i], true
}

// bench is one harness invocation: its options, binaries and the Redis every scenario shares.
type bench struct {
	o         options
	root      string // module root, where go build runs
	tmp       string
	logs      string
	ticks     float64 // USER_HZ
	noop      string
	loadgen   string
	ghz       string // with -engine ghz
	rlqsload  string // for scenario rlqs
	sidecar   string
	reference string // envoyproxy/ratelimit, for scenario ref
	// referenceRoot is its RUNTIME_ROOT: the bench rules at current/config/bench.yaml.
	referenceRoot string
	rules         string
	redis         *redisServer
	cluster       redisNodes // the masters of scenario cl's Redis Cluster
	progress      io.Writer
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.replot {
		return replot(o, stdout)
	}
	b := &bench{o: o, progress: stderr}
	if b.root, err = moduleRoot(ctx); err != nil {
		return err
	}
	if b.tmp, err = os.MkdirTemp("", "rlbench-"); err != nil {
		return err
	}
	defer os.RemoveAll(b.tmp)
	// Absolute, because redis-server runs in its log directory and is also told it with --dir.
	if b.logs, err = filepath.Abs(filepath.Join(o.out, "logs")); err != nil {
		return err
	}
	if err := os.MkdirAll(b.logs, 0o755); err != nil {
		return err
	}
	b.ticks = clockTicks(ctx)

	if err := b.build(ctx); err != nil {
		return err
	}
	if b.needsRedis() {
		if b.redis, err = startRedis(ctx, o.redisServer, b.logs); err != nil {
			return err
		}
		defer b.redis.stop()
	}
	if b.uses(func(sc scenario) bool { return sc.Store == "cluster" }) {
		if b.cluster, err = startCluster(ctx, o.redisServer, b.logs, clusterMasters); err != nil {
			return err
		}
		defer b.cluster.stop()
	}

	rep := &report{
		Started:   time.Now().UTC().Format(time.RFC3339),
		Machine:   machineInfo(ctx, o.redisServer),
		Command:   b.sanitize(strings.TrimSpace("go run ./bench/harness " + strings.Join(args, " "))),
		Options:   optionsJSON(o),
		StandIn:   o.standIn,
		ClockTick: b.ticks,
	}
	for _, name := range o.scenarios {
		sc, _ := scenarioByName(name)
		rep.Scenarios = append(rep.Scenarios, sc)
	}
	failed := 0
	for r := 1; r <= o.runs; r++ {
		for _, sc := range rep.Scenarios {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			rr := b.runOne(ctx, sc, r)
			if rr.Error != "" {
				failed++
			}
			rep.Runs = append(rep.Runs, rr)
			fmt.Fprintln(b.progress, rr.line(o.runs))
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	rep.summarize()
	if err := rep.write(o); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\nwrote %s, %s, %s\n", rep.table(), filepath.Join(o.out, "results.json"),
		filepath.Join(o.out, "table.md"), filepath.Join(o.out, "benchmarks.png"))
	if o.publish {
		if err := rep.publish(o); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "published %s and %s\n", filepath.Join(o.docs, o.docName()+".md"),
			filepath.Join(o.docs, o.docName()+".png"))
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d runs failed (see results.json and %s)", failed, len(rep.Runs), b.logs)
	}
	return nil
}

// replot rewrites what a run wrote from its results.json, for a change to the table, chart or page that
// needs no new measurement; the page keeps the command that measured it.
func replot(o options, stdout io.Writer) error {
	b, err := os.ReadFile(filepath.Join(o.out, "results.json"))
	if err != nil {
		return err
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(o.out, "results.json"), err)
	}
	// The page is the engine's that measured, whatever -engine says.
	if engine, ok := rep.Options["engine"].(string); ok {
		o.engine = engine
	}
	rep.summarize()
	if err := rep.write(o); err != nil {
		return err
	}
	if o.publish {
		if err := rep.publish(o); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "rewrote %s\n", o.out)
	return nil
}

// ghzVersion is the ghz release -engine ghz installs: the one the reference figures were measured with.
const ghzVersion = "v0.121.0"

// docName is the base name of the files -publish writes: each engine has its own page.
func (o options) docName() string {
	if o.engine == "ghz" {
		return "benchmarks-ghz"
	}
	return "benchmarks"
}

// uses reports whether a scenario in the list, as run (a stand-in run serves only the no-op), has is true.
func (b *bench) uses(is func(scenario) bool) bool {
	return !b.o.standIn && slices.ContainsFunc(b.o.scenarios, func(n string) bool {
		sc, _ := scenarioByName(n)
		return is(sc)
	})
}

func (b *bench) needsRedis() bool {
	return b.uses(func(sc scenario) bool { return sc.Store == "redis" })
}

// serviceModule is the module of the sidecar the harness builds and measures; the harness's own module (bench)
// requires it, replaced by the checkout's root directory.
const serviceModule = "github.com/ratelimit-sidecar/ratelimit-sidecar"

// moduleRoot returns the repository root, the directory of the service's module, where go build runs (go.work
// there joins the benchmark module, so ./bench/... builds from it too).
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", serviceModule).Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w: run from the repository", serviceModule, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", errors.New("no directory for " + serviceModule + ": run from the repository")
	}
	return dir, nil
}

// build compiles the binaries into the temporary directory, so a run measures exactly the tree checked out.
func (b *bench) build(ctx context.Context) error {
	targets := []struct {
		dst *string
		pkg string
	}{{&b.noop, "./bench/noop"}, {&b.loadgen, "./bench/loadgen"}}
	serves := func(server string) bool { return b.uses(func(sc scenario) bool { return sc.Server == server }) }
	if b.uses(func(sc scenario) bool { return sc.Load == rlqsLoad }) {
		targets = append(targets, struct {
			dst *string
			pkg string
		}{&b.rlqsload, "./bench/rlqsload"})
	}
	if serves("sidecar") || serves("reference") {
		if b.o.rules != "" {
			b.rules = b.o.rules
		} else {
			b.rules = filepath.Join(b.tmp, "bench.yaml")
			if err := os.WriteFile(b.rules, []byte(benchRules), 0o644); err != nil {
				return err
			}
		}
	}
	if serves("sidecar") {
		if b.o.sidecar != "" {
			b.sidecar = b.o.sidecar
		} else {
			targets = append(targets, struct {
				dst *string
				pkg string
			}{&b.sidecar, "./cmd/ratelimit-sidecar"})
		}
	}
	for _, t := range targets {
		*t.dst = filepath.Join(b.tmp, filepath.Base(t.pkg))
		// -tags vtprotobuf as the Makefile and the Dockerfile build the
		// sidecar: without it responses go through proto's reflection.
		fmt.Fprintf(b.progress, "go build -tags vtprotobuf -o %s %s\n", *t.dst, t.pkg)
		cmd := exec.CommandContext(ctx, "go", "build", "-tags", "vtprotobuf", "-o", *t.dst, t.pkg)
		cmd.Dir = b.root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", t.pkg, err, out)
		}
	}
	var err error
	if b.o.engine == "ghz" {
		if b.ghz, err = b.install(ctx, b.o.ghz, "github.com/bojand/ghz/cmd/ghz@"+ghzVersion); err != nil {
			return err
		}
	}
	if serves("reference") {
		if b.reference, err = b.install(ctx, b.o.reference, referencePkg); err != nil {
			return err
		}
		// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY/*.yaml are its rules.
		b.referenceRoot = filepath.Join(b.tmp, "reference-runtime")
		config := filepath.Join(b.referenceRoot, "current", "config")
		rules, err := os.ReadFile(b.rules)
		if err == nil {
			err = os.MkdirAll(config, 0o755)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(config, "bench.yaml"), rules, 0o644)
		}
		if err != nil {
			return fmt.Errorf("rules for envoyproxy/ratelimit: %w", err)
		}
	}
	return nil
}

// install returns prebuilt when it is set, else go installs pkg (path@version, from the module proxy) into
// the build directory and returns the binary, which go install names after the package's last element.
func (b *bench) install(ctx context.Context, prebuilt, pkg string) (string, error) {
	if prebuilt != "" {
		return prebuilt, nil
	}
	fmt.Fprintf(b.progress, "go install %s\n", pkg)
	cmd := exec.CommandContext(ctx, "go", "install", pkg)
	cmd.Dir, cmd.Env = b.tmp, append(os.Environ(), "GOBIN="+b.tmp)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s: %w\n%s", pkg, err, out)
	}
	path, _, _ := strings.Cut(pkg, "@")
	return filepath.Join(b.tmp, filepath.Base(path)), nil
}

// referencePkg is the envoyproxy/ratelimit build scenario ref runs: its main package at the newest commit the
// Go module proxy serves (3fb7025 of 2026-01-22; the project tags no releases since v1.4.0 of 2020).
const referencePkg = "github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.1-0.20260122083618-3fb702589d36"

// rulesFor returns the rules file sc's sidecar reads: the bench rules, or for a scenario with an Algorithm a
// copy of them that makes it the default (written once; see algorithmRules).
func (b *bench) rulesFor(sc scenario) (string, error) {
	if sc.Load == rlqsLoad {
		return b.rlqsRules()
	}
	if sc.Algorithm == "" {
		return b.rules, nil
	}
	path := filepath.Join(b.tmp, "bench-"+sc.Algorithm+".yaml")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	rules, err := os.ReadFile(b.rules)
	if err != nil {
		return "", err
	}
	return path, os.WriteFile(path, algorithmRules(rules, sc.Algorithm), 0o644)
}

// algorithmLimits are the limits that stand for the bench rules' 10^9 (per second, or per hour for the tenants)
// under an algorithm whose rules refuse it: a token bucket refills at most one token per microsecond, and a sliding log holds at most 1,000
// hits (rules.MaxSlidingLogLimit). Both stay far above what one of scenario (a)'s -keys keys gets, so those
// scenarios too measure counting, not refusing; a sliding log's cost grows with the hits in its window, which
// the load sets, not the limit.
var algorithmLimits = map[string]string{"token_bucket": "1000000", "sliding_log": "1000"}

// algorithmRules returns rules with algorithm as the file's default (a top-level key may go anywhere in the
// mapping) and the bench rules' 10^9 limits lowered to algorithmLimits' value where it has one.
func algorithmRules(rules []byte, algorithm string) []byte {
	if l, ok := algorithmLimits[algorithm]; ok {
		rules = bytes.ReplaceAll(rules, []byte("requests_per_unit: 1000000000}"), []byte("requests_per_unit: "+l+"}"))
	}
	return append([]byte("algorithm: "+algorithm+"\n"), rules...)
}

// benchRules is the rules file for domain bench (envoyproxy/ratelimit's format, which the sidecar reads).
// Every limit but the hot key's is far above what one machine can send, so scenarios a, c, d and e measure
// the cost of counting, not of refusing. BenchmarkShouldRateLimit in pkg/envoyrls reads the same file.
//
//go:embed bench.yaml
var benchRules string
