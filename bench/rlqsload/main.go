// Command rlqsload drives the Rate Limit Quota Service (envoy.service.rate_limit_quota.v3) of any server with a
// fleet of simulated Envoys, and reports what it sent and what the fleet admitted against the rule's limit.
//
// Each of -streams Envoys holds one stream and reports -buckets bucket ids ({-key: b0} ... ) every -interval
// (Envoy 1.40 reports every 5 s; a shorter, "compressed" interval loads the server harder with fewer
// streams, for its cost per report: the over-admission and the use of the limit are Envoy's only at 5 s). Between reports each Envoy offers its share of -demand requests per second per bucket (the shares
// follow Zipf's law with exponent -skew) and decides them one by one as Envoy 1.40's filter does against the
// assignments the server sends (internal/testutil/envoyrlqs, the project's model of Envoy 1.40), sending a
// bucket's first report as soon as its first request arrives. Every bucket matches one rule of -limit requests per -window; the output counts,
// per bucket and window wholly inside the measured interval, what the whole fleet admitted against it.
//
//	go run ./bench/rlqsload -addr 127.0.0.1:8081 -streams 100 -buckets 20 -limit 2000 -window 20s -json
//
// The JSON is bench/internal/result's Load, whose calls are the reports, with RLQS's figures; bench/harness
// runs it as scenario rlqs.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/local"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/result"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "rlqsload:", err)
		os.Exit(1)
	}
}

type options struct {
	addr     string
	domain   string
	key      string
	streams  int
	buckets  int
	interval time.Duration
	tick     time.Duration
	duration time.Duration
	warmup   time.Duration
	limit    uint64
	window   time.Duration
	demand   float64
	skew     float64
	json     bool
	marks    bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("rlqsload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "addr", "", "server address: host:port or unix:///path (required)")
	fs.StringVar(&o.domain, "domain", "bench", "RLQS domain (the rules domain)")
	fs.StringVar(&o.key, "key", "user", "the bucket_id's one key; its values are b0, b1, ...")
	fs.IntVar(&o.streams, "streams", 100, "simulated Envoys, each with its own connection and stream")
	fs.IntVar(&o.buckets, "buckets", 20, "bucket ids every Envoy reports")
	fs.DurationVar(&o.interval, "interval", 5*time.Second, "report interval (Envoy 1.40: 5s; shorter compresses time; time_elapsed is sent in whole seconds from 1s on)")
	fs.DurationVar(&o.tick, "tick", 100*time.Millisecond, "how often an Envoy decides the requests that arrived since the last tick")
	fs.DurationVar(&o.duration, "duration", 60*time.Second, "measured interval")
	fs.DurationVar(&o.warmup, "warmup", 10*time.Second, "load before the measured interval, not reported (at least one report interval, so every bucket has its first assignment)")
	fs.Uint64Var(&o.limit, "limit", 2000, "the rule's requests per -window, for the over-admission (must match the server's rules)")
	fs.DurationVar(&o.window, "window", 20*time.Second, "the rule's window (must match the server's rules)")
	fs.Float64Var(&o.demand, "demand", 0, "requests per second the whole fleet offers each bucket (0: three times the rule's rate)")
	fs.Float64Var(&o.skew, "skew", 1, "Zipf exponent of the Envoys' shares of the demand (0: even)")
	fs.BoolVar(&o.json, "json", false, "print one JSON object instead of text")
	fs.BoolVar(&o.marks, "marks", false, `write "mark start" and "mark end" to stderr at the measured interval's bounds`)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var errs []error
	if o.addr == "" {
		errs = append(errs, errors.New("-addr is required"))
	}
	if o.streams < 1 || o.buckets < 1 || o.limit < 1 {
		errs = append(errs, errors.New("-streams, -buckets and -limit must be at least 1"))
	}
	if o.interval <= 0 || o.tick <= 0 || o.duration <= 0 || o.window <= 0 || o.warmup < 0 {
		errs = append(errs, errors.New("-interval, -tick, -duration and -window must be positive, -warmup not negative"))
	}
	if o.tick > o.interval {
		errs = append(errs, errors.New("-tick must not exceed -interval"))
	}
	if o.demand < 0 || o.skew < 0 {
		errs = append(errs, errors.New("-demand and -skew must not be negative"))
	}
	if o.demand == 0 {
		o.demand = 3 * float64(o.limit) / o.window.Seconds()
	}
	return o, errors.Join(errs...)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	// One connection per Envoy, as a fleet has: the server's cost per connection is part of the cost.
	conns := make([]*grpc.ClientConn, o.streams)
	for i := range conns {
		cc, err := local.Dial(ctx, o.addr, 10*time.Second)
		if err != nil {
			return err
		}
		defer cc.Close()
		conns[i] = cc
	}
	res := generate(ctx, o, conns, stderr)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if o.json {
		return json.NewEncoder(stdout).Encode(res)
	}
	printText(stdout, res)
	return nil
}

// generate runs the fleet for the warm-up and the measured interval and returns what it counted.
func generate(ctx context.Context, o options, conns []*grpc.ClientConn, stderr io.Writer) result.Load {
	t0 := time.Now()
	sp := span{start: t0.Add(o.warmup), end: t0.Add(o.warmup + o.duration)}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var t tally
	envoys := make([]*envoy, o.streams)
	var wg sync.WaitGroup
	for i, share := range shares(o.streams, o.skew) {
		envoys[i] = newEnvoy(o, share, &t, sp)
		start := t0.Add(time.Duration(i) * o.interval / time.Duration(o.streams))
		wg.Go(func() { envoys[i].run(ctx, conns[i], start) })
	}
	local.SleepUntil(ctx, sp.start)
	if o.marks {
		fmt.Fprintln(stderr, "mark start")
	}
	local.SleepUntil(ctx, sp.end)
	// The end mark before the streams close, so that the harness samples this process while it still runs
	// (what happens after sp.end is not counted anyway).
	if o.marks {
		fmt.Fprintln(stderr, "mark end")
	}
	cancel()
	wg.Wait()

	r := &result.RLQS{Streams: o.streams, Buckets: o.buckets, IntervalS: o.interval.Seconds(), Usages: t.usages.Load(),
		Responses: t.responses.Load(), Assignments: t.assignments.Load(), TokenBucket: t.tokenBucket.Load(),
		DenyAll: t.denyAll.Load(), AllowAll: t.allowAll.Load(), Abandons: t.abandons.Load(),
		LimitPerWindow: o.limit, WindowS: o.window.Seconds()}
	perBucket := o.duration.Seconds() * float64(o.buckets)
	r.OfferedPerS, r.AdmittedPerS = float64(t.offered.Load())/perBucket, float64(t.admitted.Load())/perBucket
	overAdmission(r, envoys, sp, o.window)
	l := result.Load{Addr: o.addr, Domain: o.domain, Scenario: "rlqs", Concurrency: o.streams, Conns: len(conns),
		Keys: o.buckets, WarmupS: o.warmup.Seconds(), MeasuredS: o.duration.Seconds(), Calls: t.reports.Load(),
		Errors: t.errors.Load(), RLQS: r}
	if p := t.firstError.Load(); p != nil {
		l.FirstError = *p
	}
	l.DecisionsPerS = float64(l.Calls) / l.MeasuredS
	l.DescriptorsPerS = float64(r.Usages) / l.MeasuredS
	return l
}

// overAdmission sums the Envoys' admitted requests per bucket and window, over the windows wholly inside sp,
// and sets r's over-admission figures from them.
func overAdmission(r *result.RLQS, envoys []*envoy, sp span, size time.Duration) {
	sum := map[winKey]uint64{}
	for _, e := range envoys {
		for k, n := range e.admitted {
			sum[k] += n
		}
	}
	var fills []float64
	for k, n := range sum {
		start := time.UnixMilli(k.start)
		if start.Before(sp.start) || start.Add(size).After(sp.end) {
			continue
		}
		fills = append(fills, float64(n)/float64(r.LimitPerWindow))
	}
	r.Windows = len(fills)
	if len(fills) == 0 {
		return
	}
	slices.Sort(fills)
	r.FillMin, r.EpsilonMax, r.EpsilonP50 = fills[0], fills[len(fills)-1]-1, fills[len(fills)/2]-1
}

func printText(w io.Writer, l result.Load) {
	r := l.RLQS
	fmt.Fprintf(w, "target      %s  domain=%s  streams=%d  buckets=%d  interval=%gs\n", l.Addr, l.Domain, r.Streams, r.Buckets, r.IntervalS)
	fmt.Fprintf(w, "measured    %.2fs after %.2fs warm-up\n", l.MeasuredS, l.WarmupS)
	fmt.Fprintf(w, "reports     %d (%.1f/s), usages %d (%.1f/s), responses %d, errors %d %s\n", l.Calls, l.DecisionsPerS,
		r.Usages, l.DescriptorsPerS, r.Responses, l.Errors, l.FirstError)
	fmt.Fprintf(w, "actions     token_bucket %d  allow_all %d  deny_all %d  abandon %d\n", r.TokenBucket, r.AllowAll, r.DenyAll, r.Abandons)
	fmt.Fprintf(w, "per bucket  offered %.1f/s  admitted %.1f/s  limit %d per %gs\n", r.OfferedPerS, r.AdmittedPerS, r.LimitPerWindow, r.WindowS)
	fmt.Fprintf(w, "windows     %d  admitted/limit: min %.3f  median %.3f  max %.3f (ε = %.3f)\n", r.Windows, r.FillMin,
		1+r.EpsilonP50, 1+r.EpsilonMax, r.EpsilonMax)
}
