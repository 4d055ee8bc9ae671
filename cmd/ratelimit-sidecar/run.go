package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoyrls"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

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
	now, stopClock := time.Now, func() {} // the in-memory store is one replica: its clock is the clock
	if cfg.redisURL == "" {
		store, closeStore = window.NewMemory(), func() error { return nil }
		log.Warn("using the in-memory store: counters are not shared with other replicas; set -redis-url for a global limit")
	} else {
		client, err := newRedisClient(cfg.redisURL, cfg.redisTimeout)
		if err != nil {
			return err
		}
		if now, stopClock, err = startClock(ctx, client, cfg.clockSync, log, nil); err != nil {
			client.Close()
			return err
		}
		store, closeStore = window.NewRedis(client), client.Close
	}
	defer closeStore()
	defer stopClock() // first: it uses the client

	srv, err := envoyrls.NewServer(envoyrls.Options{
		Store:        store,
		Rules:        rules,
		KeyPrefix:    cfg.keyPrefix,
		StoreTimeout: cfg.redisTimeout,
		Now:          now,
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
