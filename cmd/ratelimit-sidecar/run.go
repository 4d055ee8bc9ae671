package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoyrls"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// config is the process configuration: flags, each with an RLS_ variable.
type config struct {
	configPath      string
	grpcAddr        string
	httpAddr        string
	redisURL        string
	redisTimeout    time.Duration
	keyPrefix       string
	logLevel        string
	logFormat       string
	shutdownTimeout time.Duration
	healthInterval  time.Duration
	limits          envoyrls.InputLimits
}

// envName is the environment variable of a flag: RLS_ and the flag in upper
// snake case ("redis-url" -> "RLS_REDIS_URL").
func envName(flagName string) string {
	return "RLS_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func parseFlags(name string, args []string, getenv func(string) string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.configPath, "config", "", "rules file, or directory of *.yaml/*.yml rule files (required)")
	fs.StringVar(&c.grpcAddr, "grpc-addr", ":8081", "gRPC listen address for ratelimit.v3 and grpc.health.v1: host:port or unix:///path")
	fs.StringVar(&c.httpAddr, "http-addr", ":8082", "HTTP listen address for /healthz, /readyz, /rules and /metrics; empty disables")
	fs.StringVar(&c.redisURL, "redis-url", "", "redis://[user:password@]host:port/db or rediss://...; empty uses the in-memory store (one replica only)")
	fs.DurationVar(&c.redisTimeout, "redis-timeout", 15*time.Millisecond, "bound on each store call; keep it below Envoy's filter timeout (20ms by default)")
	fs.StringVar(&c.keyPrefix, "key-prefix", "ratelimit", "first part of every counter key")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "json", "json or console")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long in-flight calls may take to finish after SIGTERM")
	fs.DurationVar(&c.healthInterval, "health-interval", time.Second, "how often the store is pinged for readiness")
	fs.IntVar(&c.limits.MaxDescriptors, "max-descriptors", 64, "most descriptors in one request")
	fs.IntVar(&c.limits.MaxEntries, "max-entries", 32, "most entries in one descriptor")
	fs.IntVar(&c.limits.MaxEntryBytes, "max-entry-bytes", 1024, "longest descriptor key, value or domain, in bytes")
	fs.Uint64Var(&c.limits.MaxHits, "max-hits", 1<<32-1, "largest hits_addend of one descriptor")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return // the flag wins over the environment
		}
		if v := getenv(envName(f.Name)); v != "" {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", envName(f.Name), v, err))
			}
		}
	})
	if c.configPath == "" {
		errs = append(errs, errors.New("-config (or RLS_CONFIG) is required"))
	}
	return c, errors.Join(errs...)
}

func newLogger(level, format string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("-log-level: %w", err)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	var e zapcore.Encoder
	switch format {
	case "json":
		e = zapcore.NewJSONEncoder(enc)
	case "console":
		e = zapcore.NewConsoleEncoder(enc)
	default:
		return nil, fmt.Errorf("-log-format %q: want json or console", format)
	}
	return zap.New(zapcore.NewCore(e, zapcore.Lock(zapcore.AddSync(w)), lvl)), nil
}

// listen opens host:port or unix:///path; a stale socket file is replaced.
func listen(addr string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		return net.Listen("unix", path)
	}
	return net.Listen("tcp", addr)
}

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

	rules, err := envoyrls.LoadRules(cfg.configPath)
	if err != nil {
		return err
	}

	var store envoyrls.Store
	var closeStore func() error
	if cfg.redisURL == "" {
		store, closeStore = window.NewMemory(), func() error { return nil }
		log.Warn("using the in-memory store: counters are not shared with other replicas; set -redis-url for a global limit")
	} else {
		client, err := newRedisClient(cfg.redisURL, cfg.redisTimeout)
		if err != nil {
			return err
		}
		store, closeStore = window.NewRedis(client), client.Close
	}
	defer closeStore()

	srv, err := envoyrls.NewServer(envoyrls.Options{
		Store:        store,
		Rules:        rules,
		KeyPrefix:    cfg.keyPrefix,
		StoreTimeout: cfg.redisTimeout,
		Limits:       cfg.limits,
		Logger:       log,
	})
	if err != nil {
		return err
	}

	grpcLis, err := listen(cfg.grpcAddr)
	if err != nil {
		return fmt.Errorf("-grpc-addr: %w", err)
	}
	gs := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(gs, srv)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	setServing := func(ok bool) {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if ok {
			st = healthpb.HealthCheckResponse_SERVING
		}
		hs.SetServingStatus("", st)
		hs.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, st)
	}
	setServing(false)

	var ready atomic.Bool
	var httpSrv *http.Server
	httpAddr := ""
	if cfg.httpAddr != "" {
		httpLis, err := listen(cfg.httpAddr)
		if err != nil {
			grpcLis.Close()
			return fmt.Errorf("-http-addr: %w", err)
		}
		httpAddr = httpLis.Addr().String()
		httpSrv = &http.Server{
			Handler:           envoyrls.NewHTTPHandler(srv, envoyrls.HTTPOptions{Ready: ready.Load}),
			ReadHeaderTimeout: 5 * time.Second,
		}
		go httpSrv.Serve(httpLis)
	}
	grpcDone := make(chan error, 1)
	go func() { grpcDone <- gs.Serve(grpcLis) }()

	log.Info("serving",
		zap.String("grpc_addr", grpcLis.Addr().String()),
		zap.String("http_addr", httpAddr),
		zap.Strings("domains", rules.Domains()),
		zap.Strings("rule_files", rules.Files()),
		zap.Bool("redis", cfg.redisURL != ""))

	// The health loop owns readiness: SERVING once rules are loaded (they
	// are, by now) and the store answers.
	healthCtx, stopHealth := context.WithCancel(ctx)
	healthDone := make(chan struct{})
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
			if ok := err == nil; ready.Swap(ok) != ok {
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
		stopHealth()
		<-healthDone
		return fmt.Errorf("grpc server: %w", err)
	}

	log.Info("shutting down: draining in-flight calls", zap.Duration("timeout", cfg.shutdownTimeout))
	stopHealth()
	<-healthDone
	ready.Store(false)
	hs.Shutdown() // NOT_SERVING at once, so probes and Envoy move away
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
	if httpSrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		httpSrv.Shutdown(sctx)
		cancel()
	}
	log.Info("stopped")
	return nil
}

// newRedisClient makes the client for the counting path: no retries (a
// retried script can count twice) and deadlines from the request's context.
func newRedisClient(url string, timeout time.Duration) (*redis.Client, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("-redis-url: %w", err)
	}
	opts.MaxRetries = -1
	opts.ContextTimeoutEnabled = true
	opts.DialTimeout = max(timeout*10, time.Second)
	return redis.NewClient(opts), nil
}

// validate is the "validate" subcommand: it loads rules, prints every problem
// with file and line, and fails when there is one.
func validate(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ratelimit-sidecar validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", getenv(envName("config")), "rules file or directory to check")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" {
		return errors.New("validate: -config is required")
	}
	rules, err := envoyrls.LoadRules(*path)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ok: %d domain(s) %s from %d file(s)\n", len(rules.Domains()), strings.Join(rules.Domains(), ", "), len(rules.Files()))
	return nil
}
