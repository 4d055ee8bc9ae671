package main

import (
	"flag"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/config"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs/redisledger"
)

// rlqsConfig is the -rlqs flags: Envoy's Rate Limit Quota Service on the
// gRPC listener, beside ShouldRateLimit (see docs/rlqs.md).
type rlqsConfig struct {
	enabled    bool
	ttl        time.Duration
	maxStreams int
	maxBuckets int
}

func (c *rlqsConfig) addFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.enabled, "rlqs", config.DefaultRLQS, "serve Envoy's Rate Limit Quota Service (envoy.service.rate_limit_quota.v3) on -grpc-addr, from the same rules and counters as ShouldRateLimit")
	fs.DurationVar(&c.ttl, "rlqs-assignment-ttl", config.DefaultRLQSAssignmentTTL, "how long an RLQS assignment lasts in Envoy unless a report renews it: whole seconds, more than Envoy's 5 s report interval; a client that goes quiet gives its share back after it")
	fs.IntVar(&c.maxStreams, "rlqs-max-streams", config.DefaultRLQSMaxStreams, "most RLQS streams served at once (one per Envoy and domain); more get ResourceExhausted")
	fs.IntVar(&c.maxBuckets, "rlqs-max-buckets", config.DefaultRLQSMaxBuckets, "most buckets one RLQS stream may report; the usages of more are refused and counted")
}

// check returns every bad -rlqs value.
func (c *rlqsConfig) check() []error {
	var errs []error
	if err := rlqs.CheckTTL(c.ttl); err != nil {
		errs = append(errs, fmt.Errorf("-rlqs-assignment-ttl %v: want whole seconds, more than Envoy's report interval of %v", c.ttl, rlqs.ReportInterval))
	}
	if c.maxStreams < 1 {
		errs = append(errs, fmt.Errorf("-rlqs-max-streams %d: want at least 1", c.maxStreams))
	}
	if c.maxBuckets < 1 {
		errs = append(errs, fmt.Errorf("-rlqs-max-buckets %d: want at least 1", c.maxBuckets))
	}
	return errs
}

// buildRLQS builds the RLQS server on the counters ShouldRateLimit uses,
// with its metrics on a.reg; nothing with -rlqs=false. The ledger that
// divides each rule among the Envoys lives where the counters do: in the
// same Redis (one hash per bucket, in its counter's hash slot), so every
// replica divides one budget, or in memory for the in-memory store's one
// replica.
func (a *app) buildRLQS(c *counters, tracer trace.Tracer) error {
	if !a.o.rlqs.enabled {
		return nil
	}
	obs, err := metrics.NewRLQS(a.reg)
	if err != nil {
		return err
	}
	var ledger rlqs.Ledger = rlqs.NewMemory(rlqs.Policy{})
	if c.client != nil {
		ledger = redisledger.New(c.client, redisledger.Options{})
	}
	a.rlqs, err = rlqs.New(rlqs.Options{
		Counters:   a.srv,
		Store:      c.store,
		Ledger:     ledger,
		Now:        c.now,
		Logger:     a.log,
		Observer:   obs,
		Tracer:     tracer,
		TTL:        a.o.rlqs.ttl,
		MaxStreams: a.o.rlqs.maxStreams,
		MaxBuckets: a.o.rlqs.maxBuckets,
		ShadowMode: a.o.shadowMode,
	})
	return err
}
