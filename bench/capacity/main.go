// Command capacity composes the per-decision costs the benchmark harness measures into what a large deployment
// needs: sidecar cores, Redis Cluster shards, their load balance under Zipf-distributed keys, and the rate at
// which the hottest slot fills its shard's one core, for this project and for envoyproxy/ratelimit.
// docs/capacity.md explains the model and its inputs.
//
//	go run ./bench/capacity                                   # the figures docs/capacity.md was written from
//	go run ./bench/capacity -results bench/out/results.json   # costs from a harness run instead
//	go run ./bench/capacity -chart docs/capacity.png          # also draws the chart
//	bench/capacity.sh                                          # remeasures everything and rewrites docs/capacity.md
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "capacity:", err)
		os.Exit(1)
	}
}

// measured are the medians of the harness run docs/capacity.md quotes (3 alternating runs of 4 s, see there),
// one cost set per scenario, measured before Cluster batching: (a) is the sidecar on one Redis, batched;
// cl-old on a 3-master cluster, where each decision was its own script call; (ref) envoyproxy/ratelimit on
// one Redis. Set a-load is (a) with Redis's cost per decision at high load, from BenchmarkShardCeiling/fixed
// (median of 3 runs of 3 s).
var measured = []costs{
	{name: "a", sidecarUs: 21.8, redisUs: 4.8, roundTrips: 0.07, redisBytes: 85},
	{name: "a-load", sidecarUs: 21.8, redisUs: 1.67, roundTrips: 0.05, redisBytes: 85},
	{name: "s", sidecarUs: 22.4, redisUs: 8.4, roundTrips: 0.06, redisBytes: 188},
	{name: "c", sidecarUs: 25.9, redisUs: 7.8, roundTrips: 0.07, redisBytes: 236},
	{name: "h", sidecarUs: 22.5, redisUs: 4.6, roundTrips: 0.08, redisBytes: 86},
	{name: "cl-old", sidecarUs: 40.2, redisUs: 19.6, roundTrips: 1.00, redisBytes: 195},
	{name: "ref", sidecarUs: 65.9, redisUs: 9.8, roundTrips: 1, redisBytes: 140},
}

// labels describe the cost sets in the table and the chart.
var labels = map[string]string{
	"a":      "sidecar, 1 descriptor, batched (a)",
	"a-load": "(a), Redis at high load (shard ceiling)",
	"s":      "sidecar, sliding window (s)",
	"c":      "sidecar, 3 descriptors (c)",
	"h":      "sidecar, half on 10 hot keys (h)",
	"cl-old": "sidecar on Cluster before batching (cl)",
	"cl":     "sidecar on a 3-master Cluster (cl)",
	"ref":    "envoyproxy/ratelimit (ref)",
}

type options struct {
	results      string
	rate         float64
	keys         int
	zipf         float64
	util         float64
	replicaCores float64
	maxShards    int
	chart        string
	ceiling      string
	keySpace     string
	bytesPerKey  float64
	bytesSliding float64
	publish      string
	rlqs         rlqsFleet
	rlqsResults  string
}

// measuredBytesPerKey are Redis's bytes per live counter, fixed and sliding window, from docs/benchmarks.md's
// key-space run (scenarios million and million-sliding).
const (
	measuredBytesPerKey        = 145
	measuredBytesPerKeySliding = 161
)

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("capacity", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.results, "results", "", "harness results.json to take the costs from (default: the figures docs/capacity.md quotes)")
	fs.Float64Var(&o.rate, "rate", 1e6, "decisions per second to serve")
	fs.IntVar(&o.keys, "keys", 1000000, "distinct counters (tenants) the decisions are spread over")
	fs.Float64Var(&o.zipf, "zipf", 1.0, "Zipf exponent of the keys' popularity (0: uniform; 1: the hottest of 10^6 takes 7%)")
	fs.Float64Var(&o.util, "util", 0.7, "the busiest a sidecar core or a shard's Redis core may be")
	fs.Float64Var(&o.replicaCores, "replica-cores", 2, "cores per sidecar replica")
	fs.IntVar(&o.maxShards, "max-shards", 512, "most Redis Cluster masters to try")
	fs.StringVar(&o.chart, "chart", "", "also draw the chart to this PNG file")
	fs.StringVar(&o.ceiling, "ceiling", "", "go test -bench ShardCeiling output to take cost set a-load from (with -results)")
	fs.StringVar(&o.keySpace, "key-space", "", "harness results.json with scenarios million and million-sliding, for the bytes per counter (default: -results, else the measured figures)")
	fs.Float64Var(&o.bytesPerKey, "bytes-per-key", measuredBytesPerKey, "Redis bytes per live fixed-window counter")
	fs.Float64Var(&o.bytesSliding, "bytes-per-key-sliding", measuredBytesPerKeySliding, "Redis bytes per live sliding-window counter")
	o.rlqs.flags(fs)
	fs.StringVar(&o.rlqsResults, "rlqs-results", "", "harness results.json with scenarios a and rlqs in one run, for the RLQS row and the requests governed per core (default: -results; alone, -publish rewrites only the page's rlqs part)")
	fs.StringVar(&o.publish, "publish", "", "rewrite the generated tables of this page (docs/capacity.md)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.rate <= 0 || o.keys < 1 || o.zipf < 0 || o.util <= 0 || o.util > 1 || o.replicaCores <= 0 || o.maxShards < 1 ||
		o.bytesPerKey <= 0 || o.bytesSliding <= 0 || !o.rlqs.valid() {
		return o, errors.New("want -rate, -keys, -replica-cores, -max-shards, -bytes-per-key* positive, -zipf not negative, 0 < -util <= 1")
	}
	if o.ceiling != "" && o.results == "" {
		return o, errors.New("-ceiling needs -results")
	}
	return o, nil
}

func run(_ context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	cs := measured
	var h *harnessRun
	if o.results != "" {
		if h, err = readHarness(o.results); err != nil {
			return err
		}
		if cs = h.costs(); len(cs) == 0 {
			return fmt.Errorf("%s: no scenario with server and Redis CPU figures", o.results)
		}
	}
	var ceil ceiling
	if o.ceiling != "" {
		if ceil, err = readCeiling(o.ceiling); err != nil {
			return err
		}
		if i := slices.IndexFunc(cs, func(c costs) bool { return c.name == "a" }); i >= 0 {
			if load, ok := ceil.loadCosts(cs[i]); ok {
				cs = slices.Insert(cs, i+1, load)
			}
		}
	}
	if err := o.readBytesPerKey(h); err != nil {
		return err
	}
	in, err := o.rlqsInputs(h)
	if err != nil {
		return err
	}
	var rlqs *usageCosts
	if in != nil {
		rlqs = &in.usage
	}
	w := workload{rate: o.rate, keys: o.keys, zipf: o.zipf, name: tenantKey}
	kl := newKeyLoad(w)
	result := table(cs, rlqs, w, kl, o) + "\n" + memoryTable(o.keys, o.bytesPerKey, o.bytesSliding)
	var section string
	if in != nil {
		section = in.section(w, kl, o)
	}
	if o.results == "" && o.rlqsResults != "" {
		// Only RLQS was measured: the rest of the page keeps the run it was written from.
		fmt.Fprint(stdout, section)
		if o.publish != "" {
			return publish(o.publish, map[string]string{"rlqs": section})
		}
		return nil
	}
	fmt.Fprint(stdout, result)
	if o.chart != "" {
		if err := chart(o.chart, cs, w, kl, o); err != nil {
			return err
		}
	}
	if o.publish != "" {
		blocks := map[string]string{"result": result}
		if h != nil {
			blocks["inputs"] = h.inputsTable()
		}
		if ceil != nil {
			blocks["ceiling"] = ceil.table()
		}
		if in != nil {
			blocks["rlqs"] = section
		}
		return publish(o.publish, blocks)
	}
	return nil
}

// readBytesPerKey takes the bytes per counter from -key-space's run, else from -results's when it has them.
func (o *options) readBytesPerKey(h *harnessRun) error {
	if o.keySpace != "" {
		var err error
		if h, err = readHarness(o.keySpace); err != nil {
			return err
		}
	}
	if h == nil {
		return nil
	}
	if v := h.bytesPerKey("million"); v > 0 {
		o.bytesPerKey = v
	}
	if v := h.bytesPerKey("million-sliding"); v > 0 {
		o.bytesSliding = v
	}
	return nil
}

// table renders what each cost set needs as Markdown, and RLQS's when rlqs holds its usage costs.
func table(cs []costs, rlqs *usageCosts, w workload, kl keyLoad, o options) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "At %.0f decisions/s over %d keys (Zipf exponent %.2g), every core at most %.0f%% busy, %.0f cores per sidecar replica:\n\n",
		w.rate, w.keys, w.zipf, o.util*100, o.replicaCores)
	fmt.Fprintln(&sb, "| costs of | sidecar µs | Redis µs | sidecar cores (replicas) | Redis cores | shards, slots placed by load | shards, even slot ranges (balance) | round trips/s | Redis MB/s | one key's ceiling, decisions/s | total rate at which the hottest slot fills a core |")
	fmt.Fprintln(&sb, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	row := func(c costs, name string, kl keyLoad) {
		bal := size(c, w.rate, kl, balanced, o.util, o.replicaCores, o.maxShards)
		even := size(c, w.rate, kl, evenRanges, o.util, o.replicaCores, o.maxShards)
		evenText := even.shardsText()
		if even.feasible {
			evenText += fmt.Sprintf(" (%.2f)", even.balance)
		}
		fmt.Fprintf(&sb, "| %s | %.3g | %.3g | %.1f (%d) | %.1f | %s | %s | %.0f | %.0f | %.0f | %.0f |\n",
			name, c.sidecarUs, c.redisUs, bal.sidecarCores, bal.replicas, bal.redisCores, bal.shardsText(),
			evenText, bal.roundTripsPS, bal.wireMBps, bal.keyCeiling, bal.rateCeiling)
	}
	for _, c := range cs {
		row(c, label(c.name), kl)
	}
	if rlqs != nil {
		row(o.rlqs.costs(*rlqs, w.rate), o.rlqs.label(w.rate), o.rlqs.keyLoad())
	}
	hot := simulate(costs{redisUs: 1}, w.rate, kl, balanced, 1, 1)
	fmt.Fprintf(&sb, "\nThe hottest key takes %.2f%% of the decisions, the hottest slot %.2f%%.\n", hot.hottestKey*100, hot.hottestSlot*100)
	return sb.String()
}

func label(name string) string {
	if l := labels[name]; l != "" {
		return l
	}
	return name
}
