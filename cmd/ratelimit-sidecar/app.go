package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/httpapi"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/listen"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/reload"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/tracing"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/xds"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoyrls"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
)

// app is one run of the service. newApp builds it (store, metrics, server,
// rules, listeners), serve serves until its ctx ends and then shuts down,
// and close releases whatever was built. Tests run many apps in one
// process, so close leaves nothing behind.
type app struct {
	o          *options
	log        *zap.Logger
	counters   *counters
	reg        *prometheus.Registry
	srv        *envoyrls.Server
	rlqs       *rlqs.Server     // nil with -rlqs=false
	calls      callObserver     // times the gRPC calls of srv
	tracing    *tracing.Tracing // nil without -tracing
	reloader   *reload.Watcher  // nil with -config-type grpc-xds-sotw
	xds        *xds.Client      // nil with -config-type file
	health     *healthService
	grpc       *grpc.Server
	grpcLis    net.Listener
	httpLis    net.Listener // nil without -http-addr
	debugLis   net.Listener // nil without -debug-addr
	metricsLis net.Listener // nil without -metrics-addr
	http       httpServers
	// stopHealth stops the health loop and waits for it; set by serve.
	stopHealth func()
	// closers release what was built, run last first by close.
	closers []func()
}

// newApp builds the service from o and loads the rules; a load that
// fails returns every problem, with file and line. On error, whatever was
// built is released.
func newApp(ctx context.Context, o *options, log *zap.Logger) (*app, error) {
	a := &app{o: o, log: log, stopHealth: func() {}}
	err := a.buildServer(ctx)
	if err == nil {
		err = a.buildListeners()
	}
	if err != nil {
		a.close()
		return nil, err
	}
	return a, nil
}

// buildServer builds the tracing, the counter store, the metrics, the
// server and its reloader, and loads the rules; or, with -config-type
// grpc-xds-sotw, the xDS client that serve runs.
func (a *app) buildServer(ctx context.Context) error {
	var err error
	if a.tracing, err = newTracing(ctx, &a.o.tracing, a.log); err != nil {
		return err
	}
	var tracer trace.Tracer // nil: no spans, and no cost, anywhere
	if a.tracing != nil {
		tracer = a.tracing.Tracer()
		a.closers = append(a.closers, a.flushTraces) // after a failed build; shutdown flushes first
	}
	clockOffset := newClockOffsetGauge()
	c, err := newCounters(ctx, a.o, a.log, clockOffset, tracer)
	if err != nil {
		return err
	}
	a.counters = c
	a.closers = append(a.closers, func() { c.close() })
	if a.reg, err = newRegistry(clockOffset, c.breakerOpen); err != nil {
		return err
	}
	recorder, err := metrics.New(metrics.Options{Registerer: a.reg, PoolStats: c.poolStats, RoundTrips: c.roundTrips,
		ResponseTimeAsMilliseconds: a.o.responseTimeMs})
	if err != nil {
		return err
	}
	a.srv, err = envoyrls.NewServer(envoyrls.Options{
		Store:     c.store,
		KeyPrefix: a.o.keyPrefix,
		Now:       c.now,
		Limits:    a.o.limits,
		Logger:    a.log,
		Observer:  recorder,
		Tracer:    tracer,

		NearLimitRatio:  a.o.nearLimitRatio,
		ShadowMode:      a.o.shadowMode,
		QuotaMode:       a.o.quotaMode,
		DynamicMetadata: a.o.dynamicMetadata,
		ReferenceKeys:   a.o.refKeys.options(a.o.usesRedis(), a.log),
		MaxConcurrent:   a.o.maxConcurrent,
	})
	if err != nil {
		return err
	}
	a.calls = recorder
	if err := a.buildRLQS(c, tracer); err != nil {
		return err
	}
	if a.o.xds.configType == configXDS {
		a.xds, err = newXDSClient(a.o, a.log, func(s *rules.Set) {
			a.srv.SetRules(s)
			a.health.rulesReady() // built before serve runs the client
		}, recorder.ObserveReload)
		return err
	}
	a.reloader, err = reload.New(reload.Options{
		Path:     a.o.configPath,
		Apply:    a.srv.SetRules,
		Logger:   a.log,
		OnReload: recorder.ObserveReload,

		MergeDomains: a.o.mergeDomains,
	})
	if err != nil {
		return err
	}
	return a.reloader.Reload(ctx)
}

// newRegistry returns a registry of the run's own, not the global one
// (tests run several), holding the clock offset and the breaker's state.
func newRegistry(clockOffset prometheus.Gauge, breakerOpen func() bool) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(clockOffset); err != nil {
		return nil, err
	}
	if err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ratelimit_circuit_breaker_open",
		Help: "1 while the Redis circuit breaker refuses store calls (open or half-open), else 0.",
	}, func() float64 {
		if breakerOpen() {
			return 1
		}
		return 0
	})); err != nil {
		return nil, err
	}
	return reg, nil
}

// buildListeners opens the gRPC, HTTP and debug listeners and builds the
// gRPC server with its health service. Nothing is served until serve.
func (a *app) buildListeners() error {
	// The certificates load before the port opens: TLS that cannot be
	// served stops the start.
	creds, err := a.o.grpcTLS.serverOption(a.log)
	if err != nil {
		return err
	}
	lis, err := listen.Listen(a.o.grpcAddr)
	if err != nil {
		return fmt.Errorf("-grpc-addr: %w", err)
	}
	a.grpcLis = lis
	// What shutdown already stopped, close finds stopped: a second Close
	// of a listener (Serve closes it) and Stop after GracefulStop do
	// nothing.
	a.closers = append(a.closers, func() { lis.Close() })
	opts := []grpc.ServerOption{
		// A pool of stream workers reuses goroutines whose stacks have
		// already grown to what a decision needs; a new goroutine per call
		// spends CPU growing and copying its stack.
		grpc.NumStreamWorkers(64),
		// Descriptor values that are not UTF-8 (Envoy copies header bytes)
		// are counted, not refused with Internal, which Envoy fails open on.
		grpc.ForceServerCodecV2(envoyrls.NewCodec()),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionAge:      a.o.grpcMaxAge,
			MaxConnectionAgeGrace: a.o.grpcMaxAgeGrace,
		}),
	}
	if creds != nil {
		opts = append(opts, creds)
	}
	if a.tracing != nil {
		// Only with tracing: without it, calls pass no interceptor.
		opts = append(opts, a.tracing.ServerOption())
	}
	a.grpc = grpc.NewServer(opts...)
	a.closers = append(a.closers, a.grpc.Stop)
	rlsv3.RegisterRateLimitServiceServer(a.grpc, timedServer{a.srv, a.calls})
	if a.rlqs != nil {
		rlqsv3.RegisterRateLimitQuotaServiceServer(a.grpc, a.rlqs)
	}
	a.health = newHealthService(a.o.xds.rulesAtStart())
	a.health.register(a.grpc)
	a.closers = append(a.closers, a.http.stop)

	if a.o.httpAddr != "" {
		if a.httpLis, err = a.listen(a.o.httpAddr); err != nil {
			return fmt.Errorf("-http-addr: %w", err)
		}
	}
	if a.o.debugAddr != "" {
		if a.debugLis, err = a.listen(a.o.debugAddr); err != nil {
			return fmt.Errorf("-debug-addr: %w", err)
		}
	}
	if a.o.metricsAddr != "" {
		if a.metricsLis, err = a.listen(a.o.metricsAddr); err != nil {
			return fmt.Errorf("-metrics-addr: %w", err)
		}
	}
	return nil
}

// listen opens a listener that close closes unless a server took it over.
func (a *app) listen(addr string) (net.Listener, error) {
	lis, err := listen.Listen(addr)
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, func() { lis.Close() })
	return lis, nil
}

// serve serves gRPC and HTTP, watches the rules and reloads them on each
// value of hup, and runs the health loop (after the wait for Redis at
// start, see startupWait), until ctx ends; then it shuts down. It returns
// nil after a clean shutdown, the gRPC server's error, or, after shutting
// down, errStoreUnreachable when Redis never answered within
// -redis-startup-max-elapsed.
func (a *app) serve(ctx context.Context, hup <-chan os.Signal) error {
	a.serveHTTP()
	httpAddr := addrOf(a.httpLis)
	grpcDone := make(chan error, 1)
	go func() { grpcDone <- a.grpc.Serve(a.grpcLis) }()

	// Background work owned by this run: rule watching, SIGHUP and the
	// health loop. All of it stops before serve returns.
	bgCtx, stopBG := context.WithCancel(ctx)
	var bg sync.WaitGroup
	defer func() { stopBG(); bg.Wait() }()
	bg.Go(func() { a.reloadOnSignal(bgCtx, hup) })
	bg.Go(func() {
		if a.xds != nil {
			a.xds.Run(bgCtx) // returns nil when bgCtx ends
			return
		}
		if err := a.reloader.Run(bgCtx); err != nil {
			a.log.Error("not watching the rules for changes; send SIGHUP to reload", zap.Error(err))
		}
	})

	a.log.Info("serving",
		zap.String("grpc_addr", a.grpcLis.Addr().String()),
		zap.String("http_addr", httpAddr),
		zap.String("debug_addr", addrOf(a.debugLis)),
		zap.String("metrics_addr", addrOf(a.metricsLis)),
		zap.Bool("grpc_tls", a.o.grpcTLS.enabled()),
		zap.Bool("redis", a.o.usesRedis()))
	if !envoyrls.GeneratedEncoder() {
		a.log.Warn("built without -tags vtprotobuf: responses are encoded by proto's reflection, which costs more CPU; build with make or the Dockerfile")
	}

	healthCtx, cancelHealth := context.WithCancel(bgCtx)
	healthDone := make(chan struct{})
	a.stopHealth = func() { cancelHealth(); <-healthDone }
	defer a.stopHealth()
	unreachable := make(chan error, 1)
	go func() {
		defer close(healthDone)
		if a.o.usesRedis() && a.o.redis.startup.enabled() {
			// Serving already: failure modes answer until Redis does.
			err := newStartupWait(a.o.redis.startup, a.o.healthInterval, a.srv.Ping, a.log).run(healthCtx)
			if err != nil {
				if healthCtx.Err() == nil {
					unreachable <- err
				}
				return
			}
		}
		a.health.loop(healthCtx, a.srv.Ping, a.o.healthInterval, a.log)
	}()

	select {
	case <-ctx.Done():
	case err := <-grpcDone:
		return fmt.Errorf("grpc server: %w", err)
	case err := <-unreachable:
		a.log.Error("giving up: redis not reachable since start (-redis-startup-max-elapsed)", zap.Error(err))
		a.shutdown()
		return err
	}
	a.shutdown()
	return nil
}

// addrOf is lis's address, "" for nil.
func addrOf(lis net.Listener) string {
	if lis == nil {
		return ""
	}
	return lis.Addr().String()
}

// serveHTTP serves the endpoints, the metrics and pprof with /rlconfig on
// their listeners, if any.
func (a *app) serveHTTP() {
	metrics := promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{Registry: a.reg})
	rules := func() any { return a.srv.Rules() }
	var status func() map[string]any
	if a.xds != nil {
		status = a.xds.RulesStatus
	} else {
		status = a.reloader.RulesStatus
	}
	if a.httpLis != nil {
		a.http.serve(a.httpLis, httpapi.New(httpapi.Options{
			Rules:           rules,
			Ready:           a.health.ready.Ready,
			RulesStatus:     status,
			Metrics:         metrics,
			ShouldRateLimit: a.srv.ShouldRateLimit,
		}))
	}
	if a.debugLis != nil {
		a.http.serve(a.debugLis, debugHandler(httpapi.RLConfig(rules)))
	}
	if a.metricsLis != nil {
		mux := http.NewServeMux()
		mux.Handle("GET "+a.o.metricsPath, metrics)
		a.http.serve(a.metricsLis, mux)
	}
}

// reloadOnSignal reloads the rules on each value of hup until ctx ends.
func (a *app) reloadOnSignal(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if a.reloader == nil {
				a.log.Info("SIGHUP: the rules come from xDS; nothing to reload")
				continue
			}
			a.log.Debug("SIGHUP: reloading rules")
			a.reloader.Reload(ctx) // logged and recorded
		}
	}
}

// shutdown says NOT_SERVING first, so probes and Envoy move away at once,
// then lets in-flight calls finish within -shutdown-timeout, cancels the
// rest, stops the HTTP servers, and exports the spans still buffered in
// what is left of -shutdown-timeout.
func (a *app) shutdown() {
	a.health.drain()
	a.stopHealth()
	a.log.Info("shutting down: draining in-flight calls", zap.Duration("timeout", a.o.shutdownTimeout))
	deadline := time.Now().Add(a.o.shutdownTimeout)
	if a.rlqs != nil {
		// An RLQS stream never ends by itself: end them (Envoy reconnects
		// elsewhere) so the graceful stop waits only for calls.
		a.rlqs.Drain()
	}
	stopped := make(chan struct{})
	go func() { a.grpc.GracefulStop(); close(stopped) }()
	timer := time.NewTimer(a.o.shutdownTimeout)
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		a.log.Warn("shutdown timeout: cancelling remaining calls")
		a.grpc.Stop()
		<-stopped
	}
	if a.rlqs != nil {
		a.rlqs.Wait()
	}
	a.http.stop()
	if a.tracing != nil {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		a.flushTracesCtx(ctx)
		cancel()
	}
	a.log.Info("stopped")
}

// flushTraces exports the spans still buffered and stops the exporter,
// within -shutdown-timeout; after shutdown it does nothing.
func (a *app) flushTraces() {
	ctx, cancel := context.WithTimeout(context.Background(), a.o.shutdownTimeout)
	defer cancel()
	a.flushTracesCtx(ctx)
}

func (a *app) flushTracesCtx(ctx context.Context) {
	if err := a.tracing.Shutdown(ctx); err != nil {
		a.log.Warn("spans not exported", zap.Error(err))
	}
}

// close releases what newApp built, last first: the HTTP servers, the gRPC
// server and listener, then the store and its clock. It is safe after a
// partial build and after shutdown.
func (a *app) close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
	a.closers = nil
}

// callObserver is told of every ShouldRateLimit call over gRPC;
// metrics.Recorder.ObserveCall fits.
type callObserver interface{ ObserveCall(d time.Duration) }

// timedServer serves srv over gRPC and tells obs how long each call took,
// as envoyproxy/ratelimit's gRPC interceptor times its calls (its
// total_requests and response_time metrics). A method on the served type,
// rather than an interceptor, keeps calls free of the interceptor chain.
// The HTTP /json endpoint calls srv itself and is not timed, as in the
// reference.
type timedServer struct {
	*envoyrls.Server
	obs callObserver
}

func (s timedServer) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	start := time.Now()
	resp, err := s.Server.ShouldRateLimit(ctx, req)
	s.obs.ObserveCall(time.Since(start))
	return resp, err
}
