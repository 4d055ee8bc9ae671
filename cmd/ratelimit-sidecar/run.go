package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/httpapi"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/listen"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/metrics"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/reload"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoyrls"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "validate" {
		return validate(args[1:], getenv, stdout, stderr)
	}
	cfg, err := parseFlags("ratelimit-sidecar", args, getenv, stderr)
	if err != nil {
		return err
	}
	log, err := newLogger(cfg.logLevel, cfg.logFormat, stderr)
	if err != nil {
		return err
	}
	defer log.Sync()

	// SIGHUP reloads the rules. Caught from the start: its default action
	// would kill the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	var store envoyrls.Store
	var closeStore func() error
	now, stopClock := time.Now, func() {} // the in-memory store is one replica: its clock is the clock
	clockOffset := newClockOffsetGauge()
	var poolStats func() *metrics.PoolStats
	var roundTrips func() uint64
	breakerOpen := func() bool { return false }
	goRedisLogger.log.Store(log)
	if !cfg.usesRedis() {
		store, closeStore = window.NewMemory(), func() error { return nil }
		log.Warn("using the in-memory store: counters are not shared with other replicas; set -redis-url for a global limit")
	} else {
		client, err := newRedisClient(cfg)
		if err != nil {
			return err
		}
		poolStats = func() *metrics.PoolStats { return poolStatsOf(client.PoolStats()) }
		if now, stopClock, err = startClock(ctx, client, cfg.clockSync, log, clockOffset); err != nil {
			client.Close()
			return err
		}
		rs := newRedisStore(cfg, client, log)
		// The server calls the outermost layer itself, not through rs.
		store, closeStore = rs.Store, func() error { return errors.Join(rs.Close(), client.Close()) }
		breakerOpen, roundTrips = rs.BreakerOpen, rs.RoundTrips
	}
	defer closeStore()
	defer stopClock() // first: it uses the client

	// A registry per run, not the global one: tests run several.
	reg := prometheus.NewRegistry()
	if err := reg.Register(clockOffset); err != nil {
		return err
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
		return err
	}
	recorder, err := metrics.New(metrics.Options{Registerer: reg, PoolStats: poolStats, RoundTrips: roundTrips})
	if err != nil {
		return err
	}

	srv, err := envoyrls.NewServer(envoyrls.Options{
		Store:     store,
		KeyPrefix: cfg.keyPrefix,
		Now:       now,
		Limits:    cfg.limits,
		Logger:    log,
		Observer:  recorder,
	})
	if err != nil {
		return err
	}
	reloader, err := reload.New(reload.Options{
		Path:     cfg.configPath,
		Apply:    srv.SetRules,
		Logger:   log,
		OnReload: recorder.ObserveReload,
	})
	if err != nil {
		return err
	}
	if err := reloader.Reload(ctx); err != nil {
		return err // every problem, with file and line
	}

	grpcLis, err := listen.Listen(cfg.grpcAddr)
	if err != nil {
		return fmt.Errorf("-grpc-addr: %w", err)
	}
	// From here on every return closes what run started (tests call run
	// many times in one process). What the shutdown path below already
	// stopped, these deferred calls find stopped: a second Close of the
	// listener (gs.Serve closes it) and gs.Stop after GracefulStop do
	// nothing.
	defer grpcLis.Close()
	// A pool of stream workers reuses goroutines whose stacks have already
	// grown to what a decision needs; a new goroutine per call spent ~12% of
	// the CPU growing and copying its stack (pprof, in-memory store).
	gs := grpc.NewServer(
		grpc.NumStreamWorkers(64),
		// Descriptor values that are not UTF-8 (Envoy copies header bytes)
		// are counted, not refused with Internal, which Envoy fails open on.
		grpc.ForceServerCodecV2(envoyrls.NewCodec()),
	)
	defer gs.Stop()
	rlsv3.RegisterRateLimitServiceServer(gs, srv)
	hs := health.NewServer()
	draining := make(chan struct{})
	healthpb.RegisterHealthServer(gs, healthServer{Server: hs, draining: draining})
	setServing := func(ok bool) {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if ok {
			st = healthpb.HealthCheckResponse_SERVING
		}
		hs.SetServingStatus("", st)
		hs.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, st)
	}
	setServing(false)
	ready := &readiness{draining: draining}

	// The HTTP servers: each return shuts them down and waits for their
	// Serve calls, so their listeners are closed when run returns.
	var httpSrvs []*http.Server
	var httpServing sync.WaitGroup
	serveHTTP := func(lis net.Listener, h http.Handler) {
		s := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		httpSrvs = append(httpSrvs, s)
		httpServing.Go(func() { s.Serve(lis) })
	}
	stopHTTP := func() {
		for _, s := range httpSrvs {
			sctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if s.Shutdown(sctx) != nil {
				s.Close() // a connection still busy, such as a pprof profile
			}
			cancel()
		}
		httpSrvs = nil
		httpServing.Wait()
	}
	defer stopHTTP()
	httpAddr := ""
	if cfg.httpAddr != "" {
		httpLis, err := listen.Listen(cfg.httpAddr)
		if err != nil {
			return fmt.Errorf("-http-addr: %w", err)
		}
		httpAddr = httpLis.Addr().String()
		serveHTTP(httpLis, httpapi.New(httpapi.Options{
			Rules:       func() any { return srv.Rules() },
			Ready:       ready.Ready,
			RulesStatus: reloader.RulesStatus,
			Metrics:     promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
		}))
	}
	if cfg.debugAddr != "" {
		debugLis, err := listen.Listen(cfg.debugAddr)
		if err != nil {
			return fmt.Errorf("-debug-addr: %w", err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		serveHTTP(debugLis, mux)
		log.Info("serving pprof", zap.String("debug_addr", debugLis.Addr().String()))
	}
	grpcDone := make(chan error, 1)
	go func() { grpcDone <- gs.Serve(grpcLis) }()

	// Background work owned by this run: rule watching, SIGHUP and the
	// health loop. All of it stops before run returns.
	bgCtx, stopBG := context.WithCancel(ctx)
	var bg sync.WaitGroup
	defer func() { stopBG(); bg.Wait() }()
	bg.Go(func() {
		if err := reloader.Run(bgCtx); err != nil {
			log.Error("not watching the rules for changes; send SIGHUP to reload", zap.Error(err))
		}
	})
	bg.Go(func() {
		for {
			select {
			case <-bgCtx.Done():
				return
			case <-hup:
				log.Debug("SIGHUP: reloading rules")
				reloader.Reload(bgCtx) // logged and recorded
			}
		}
	})

	log.Info("serving",
		zap.String("grpc_addr", grpcLis.Addr().String()),
		zap.String("http_addr", httpAddr),
		zap.Bool("redis", cfg.usesRedis()))

	// The health loop owns readiness: SERVING once rules are loaded (they
	// are, by now) and the store answers.
	healthCtx, stopHealth := context.WithCancel(bgCtx)
	healthDone := make(chan struct{})
	defer func() { stopHealth(); <-healthDone }()
	go func() {
		defer close(healthDone)
		t := time.NewTicker(cfg.healthInterval)
		defer t.Stop()
		for {
			pctx, cancel := context.WithTimeout(healthCtx, max(cfg.healthInterval/2, 100*time.Millisecond))
			err := srv.Ping(pctx)
			cancel()
			if healthCtx.Err() != nil {
				return
			}
			if ok := err == nil; ready.set(ok) {
				setServing(ok)
				if ok {
					log.Info("store reachable: serving")
				} else {
					log.Warn("store unreachable: not ready", zap.Error(err))
				}
			}
			select {
			case <-healthCtx.Done():
				return
			case <-t.C:
			}
		}
	}()

	select {
	case <-ctx.Done():
	case err := <-grpcDone:
		return fmt.Errorf("grpc server: %w", err)
	}

	// NOT_SERVING first, so probes and Envoy move away at once. Neither
	// comes back: Shutdown makes the health loop's later updates no-ops,
	// and closing draining makes /readyz 503 for good, even if a ping in
	// flight now succeeds.
	hs.Shutdown()
	close(draining)
	stopHealth()
	<-healthDone
	log.Info("shutting down: draining in-flight calls", zap.Duration("timeout", cfg.shutdownTimeout))
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	timer := time.NewTimer(cfg.shutdownTimeout)
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		log.Warn("shutdown timeout: cancelling remaining calls")
		gs.Stop()
		<-stopped
	}
	stopHTTP()
	log.Info("stopped")
	return nil
}

// readiness is what GET /readyz reports: the health loop's last word on the
// store, until draining is closed; from then on false for good. Safe for
// concurrent use.
type readiness struct {
	ok       atomic.Bool
	draining <-chan struct{}
}

// set records whether the store answered and reports whether that changed.
func (r *readiness) set(ok bool) (changed bool) { return r.ok.Swap(ok) != ok }

// Ready reports whether the store answered the last ping and draining has
// not begun.
func (r *readiness) Ready() bool {
	select {
	case <-r.draining:
		return false
	default:
		return r.ok.Load()
	}
}

// healthServer is grpc-go's health server whose Watch streams end once
// draining is closed and the watcher has been told NOT_SERVING. An open
// Watch would otherwise hold GracefulStop until the shutdown timeout.
type healthServer struct {
	*health.Server
	draining <-chan struct{}
}

func (h healthServer) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	ws := &watchStream{Health_WatchServer: stream, ctx: ctx, told: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- h.Server.Watch(req, ws) }()
	select {
	case err := <-done:
		return err
	case <-h.draining:
	}
	select {
	case err := <-done:
		return err
	case <-ws.told:
	case <-time.After(time.Second):
	}
	cancel()
	<-done
	return nil
}

// watchStream notes when a watcher has been sent NOT_SERVING.
type watchStream struct {
	healthpb.Health_WatchServer
	ctx  context.Context
	once sync.Once
	told chan struct{}
}

func (s *watchStream) Context() context.Context { return s.ctx }

func (s *watchStream) Send(m *healthpb.HealthCheckResponse) error {
	err := s.Health_WatchServer.Send(m)
	if err == nil && m.Status == healthpb.HealthCheckResponse_NOT_SERVING {
		s.once.Do(func() { close(s.told) })
	}
	return err
}
