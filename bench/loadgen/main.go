// Command loadgen drives ShouldRateLimit calls at any envoy.service.ratelimit.v3 server and reports throughput
// and latency.
//
// It is built to stay out of the way of the server it measures (both share a small machine): requests are
// marshalled once up front and sent as raw bytes, responses are scanned for the two fields it needs instead of
// being decoded, and each worker keeps its own histogram.
//
//	go run ./bench/loadgen -addr 127.0.0.1:8081 -scenario three -c 50 -duration 20s -json
//
// With -engine ghz it hands the same requests to ghz instead, for figures comparable with ghz's (see ghz.go).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/hist"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/local"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/bench/internal/result"
)

const method = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

type options struct {
	addr     string
	c        int
	conns    int
	duration time.Duration
	warmup   time.Duration
	lap      bool
	domain   string
	scenario string
	keys     int
	timeout  time.Duration
	json     bool
	marks    bool
	engine   string
	ghz      string
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "addr", "", "server address: host:port or unix:///path (required)")
	fs.IntVar(&o.c, "c", 50, "concurrent calls in flight")
	fs.IntVar(&o.conns, "conns", 1, "gRPC connections (HTTP/2) the calls are spread over, 1 to 16")
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "measured interval")
	fs.DurationVar(&o.warmup, "warmup", 3*time.Second, "load before the measured interval, not reported")
	fs.BoolVar(&o.lap, "warmup-lap", false, "also keep warming up until every one of the -keys requests has been sent once")
	fs.StringVar(&o.domain, "domain", "bench", "rate-limit domain of every request")
	fs.StringVar(&o.scenario, "scenario", "allowed", "request shape: "+strings.Join(scenarioNames, " | "))
	fs.IntVar(&o.keys, "keys", 0, "distinct descriptor values (0: 1000, or 100000 for distinct)")
	fs.DurationVar(&o.timeout, "timeout", time.Second, "deadline of each call")
	fs.BoolVar(&o.json, "json", false, "print one JSON object instead of text")
	fs.StringVar(&o.engine, "engine", "loadgen", "who sends the calls: loadgen (this program) or ghz (the binary -ghz names; bench/harness -engine ghz installs the release it was written for)")
	fs.StringVar(&o.ghz, "ghz", "ghz", "ghz binary for -engine ghz")
	fs.BoolVar(&o.marks, "marks", false, `write "mark start" and "mark end" to stderr at the measured interval's bounds`)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.keys == 0 {
		o.keys = 1000
		if o.scenario == "distinct" {
			o.keys = 100000
		}
	}
	var errs []error
	if o.addr == "" {
		errs = append(errs, errors.New("-addr is required"))
	}
	if o.c < 1 {
		errs = append(errs, fmt.Errorf("-c %d: want at least 1", o.c))
	}
	if o.conns < 1 || o.conns > 16 {
		errs = append(errs, fmt.Errorf("-conns %d: want 1 to 16", o.conns))
	}
	if o.duration <= 0 || o.warmup < 0 || o.timeout <= 0 {
		errs = append(errs, errors.New("-duration and -timeout must be positive, -warmup not negative"))
	}
	if o.keys < 1 {
		errs = append(errs, fmt.Errorf("-keys %d: want at least 1", o.keys))
	}
	if o.engine != "loadgen" && o.engine != "ghz" {
		errs = append(errs, fmt.Errorf("-engine %q: want loadgen or ghz", o.engine))
	}
	if o.lap && o.engine == "ghz" {
		errs = append(errs, errors.New("-warmup-lap is for -engine loadgen"))
	}
	if _, ok := scenarios[o.scenario]; !ok {
		errs = append(errs, fmt.Errorf("-scenario %q: want one of %s", o.scenario, strings.Join(scenarioNames, ", ")))
	}
	return o, errors.Join(errs...)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.engine == "ghz" {
		res, err := runGhz(ctx, o, stderr)
		if err != nil {
			return err
		}
		return report(stdout, o, res)
	}
	reqs, err := buildRequests(o.scenario, o.domain, o.keys)
	if err != nil {
		return err
	}

	conns := make([]*grpc.ClientConn, o.conns)
	for i := range conns {
		cc, err := local.Dial(ctx, o.addr, 10*time.Second)
		if err != nil {
			return err
		}
		defer cc.Close()
		conns[i] = cc
	}

	res := generate(ctx, o, conns, reqs, stderr)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return report(stdout, o, res)
}

// report prints res as JSON (-json) or text.
func report(stdout io.Writer, o options, res result.Load) error {
	if o.json {
		return json.NewEncoder(stdout).Encode(res)
	}
	printText(stdout, res)
	return nil
}

// worker is one goroutine's share of the tallies; merged once at the end so the hot path shares nothing but
// the request sequence number.
type worker struct {
	h                 hist.Histogram
	calls, errs       uint64
	ok, over, unknown uint64
	firstErr          error
	firstErrAt        time.Time
}

// interval is the measured interval's bounds, in ns since t0: fixed up front, or with -warmup-lap set once the
// lap is done. Until then they are at the end of time, so every call is warm-up. The workers read the bounds on
// every call, so they are atomics.
type interval struct {
	t0             time.Time
	size           time.Duration
	startNs, endNs atomic.Int64
}

func newInterval(t0 time.Time, size time.Duration) *interval {
	iv := &interval{t0: t0, size: size}
	iv.startNs.Store(math.MaxInt64)
	iv.endNs.Store(math.MaxInt64)
	return iv
}

// set starts the interval at start after t0. The end is stored first, so a worker never sees a start with the
// end of time as its end.
func (iv *interval) set(start time.Duration) {
	iv.endNs.Store(int64(start + iv.size))
	iv.startNs.Store(int64(start))
}

// holds reports whether a call sent at began and answered at done (both since t0) lies in the interval.
func (iv *interval) holds(began, done time.Duration) bool {
	return began >= time.Duration(iv.startNs.Load()) && done <= time.Duration(iv.endNs.Load())
}

func generate(ctx context.Context, o options, conns []*grpc.ClientConn, reqs *requests, stderr io.Writer) result.Load {
	iv := newInterval(time.Now(), o.duration)
	if !o.lap {
		iv.set(o.warmup)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var seq atomic.Uint64
	workers := make([]worker, o.c)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { workers[w].run(ctx, conns[w%len(conns)], reqs, &seq, iv, o.timeout) })
	}
	start := o.warmup
	local.SleepUntil(ctx, iv.t0.Add(start))
	if o.lap {
		// The lap is done when its last request has been sent; the harness reads the key space after the end
		// mark, when its last calls have long been answered.
		for ctx.Err() == nil && seq.Load() < uint64(len(reqs.msgs)) {
			local.SleepUntil(ctx, time.Now().Add(10*time.Millisecond))
		}
		start = time.Since(iv.t0)
		iv.set(start)
	}
	end := start + o.duration
	if o.marks {
		fmt.Fprintln(stderr, "mark start")
	}
	local.SleepUntil(ctx, iv.t0.Add(end))
	cancel()
	if o.marks {
		fmt.Fprintln(stderr, "mark end")
	}
	wg.Wait()

	res := o.load()
	res.Conns, res.WarmupS, res.MeasuredS = len(conns), start.Seconds(), o.duration.Seconds()
	merge(&res, workers, reqs.descriptors)
	return res
}

// run sends the requests of reqs in turn (seq numbers them across workers) on cc until ctx ends, each call
// bounded by timeout, and tallies the calls that lie in iv.
func (ws *worker) run(ctx context.Context, cc *grpc.ClientConn, reqs *requests, seq *atomic.Uint64, iv *interval, timeout time.Duration) {
	codec := rawCodec{}
	callOpt := grpc.ForceCodecV2(codec)
	var resp response
	for ctx.Err() == nil {
		i := seq.Add(1) - 1
		req := &reqs.msgs[i%uint64(len(reqs.msgs))]
		callCtx, callCancel := context.WithTimeout(ctx, timeout)
		began := time.Since(iv.t0)
		err := cc.Invoke(callCtx, method, req, &resp, callOpt)
		done := time.Since(iv.t0)
		callCancel()
		if !iv.holds(began, done) || (err != nil && ctx.Err() != nil) {
			// Warm-up, or cut by the end: neither belongs to the measured interval.
			continue
		}
		if err == nil && resp.statuses != reqs.descriptors {
			err = fmt.Errorf("got %d descriptor statuses for %d descriptors", resp.statuses, reqs.descriptors)
		}
		if err != nil {
			ws.errs++
			if ws.firstErr == nil {
				ws.firstErr, ws.firstErrAt = err, iv.t0.Add(done)
			}
			continue
		}
		ws.calls++
		ws.h.Record(uint64(done - began))
		switch resp.code {
		case codeOK:
			ws.ok++
		case codeOverLimit:
			ws.over++
		default:
			ws.unknown++
		}
	}
}

// merge adds the workers' tallies to res, with the first error seen by any of them, and finishes it.
func merge(res *result.Load, workers []worker, descriptors int) {
	var h hist.Histogram
	var firstAt time.Time
	for i := range workers {
		ws := &workers[i]
		h.Merge(&ws.h)
		res.Calls += ws.calls
		res.Errors += ws.errs
		res.OK += ws.ok
		res.OverLimit += ws.over
		res.Unknown += ws.unknown
		if ws.firstErr != nil && (firstAt.IsZero() || ws.firstErrAt.Before(firstAt)) {
			res.FirstError, firstAt = ws.firstErr.Error(), ws.firstErrAt
		}
	}
	res.Finish(&h, descriptors)
}

// load is a result with the run's settings filled in.
func (o options) load() result.Load {
	return result.Load{Addr: o.addr, Domain: o.domain, Scenario: o.scenario, Concurrency: o.c, Conns: o.conns,
		Keys: o.keys, WarmupS: o.warmup.Seconds()}
}

// markAt writes line to w at t, so that a harness sampling the server's counters can align its samples with the
// measured interval. It returns early if ctx ends first, and writes the line either way.
func markAt(ctx context.Context, t time.Time, w io.Writer, line string) {
	local.SleepUntil(ctx, t)
	fmt.Fprintln(w, line)
}

func printText(w io.Writer, r result.Load) {
	fmt.Fprintf(w, "target      %s  domain=%s  scenario=%s  c=%d  conns=%d  keys=%d\n",
		r.Addr, r.Domain, r.Scenario, r.Concurrency, r.Conns, r.Keys)
	fmt.Fprintf(w, "measured    %.2fs after %.2fs warm-up\n", r.MeasuredS, r.WarmupS)
	if r.OK+r.OverLimit+r.Unknown == r.Calls {
		fmt.Fprintf(w, "calls       %d  (OK %d, OVER_LIMIT %d, other %d)\n", r.Calls, r.OK, r.OverLimit, r.Unknown)
	} else {
		fmt.Fprintf(w, "calls       %d  (answers not read: OK and OVER_LIMIT not told apart)\n", r.Calls)
	}
	fmt.Fprintf(w, "errors      %d", r.Errors)
	if r.FirstError != "" {
		fmt.Fprintf(w, "  first: %s", r.FirstError)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "decisions/s %.0f\n", r.DecisionsPerS)
	fmt.Fprintf(w, "descript./s %.0f\n", r.DescriptorsPerS)
	fmt.Fprintf(w, "latency µs  p50 %.1f  p99 %.1f  p99.9 %.1f  max %.1f  mean %.1f\n",
		r.P50Us, r.P99Us, r.P999Us, r.MaxUs, r.MeanUs)
}
