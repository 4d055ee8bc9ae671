package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// healthService is the process's health as gRPC (grpc.health.v1, for the
// whole server, for the rate limit service and for "ratelimit", the
// reference's name) and GET /readyz and /healthcheck see it. Its
// loop owns readiness until drain.
type healthService struct {
	hs       *health.Server
	draining chan struct{}
	ready    *readiness
	mu       sync.Mutex // orders the status published
	serving  bool       // published; under mu
}

// newHealthService returns a health service that says NOT_SERVING until its
// loop finds the store answering and, unless rulesLoaded, until
// rulesReady is called (the first good xDS push).
func newHealthService(rulesLoaded bool) *healthService {
	h := &healthService{hs: health.NewServer(), draining: make(chan struct{})}
	h.ready = &readiness{draining: h.draining}
	h.ready.rules.Store(rulesLoaded)
	h.setServing(false)
	return h
}

// rulesReady records that rules are loaded, for good.
func (h *healthService) rulesReady() {
	if !h.ready.rules.Swap(true) {
		h.publish()
	}
}

// publish sets the gRPC status to the readiness of the store and rules.
func (h *healthService) publish() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ok := h.ready.store.Load() && h.ready.rules.Load(); ok != h.serving {
		h.serving = ok
		h.setServing(ok)
	}
}

// register serves the health service on gs.
func (h *healthService) register(gs *grpc.Server) {
	healthpb.RegisterHealthServer(gs, healthServer{Server: h.hs, draining: h.draining})
}

func (h *healthService) setServing(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	h.hs.SetServingStatus("", st)
	h.hs.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, st)
	h.hs.SetServingStatus(refHealthService, st)
}

// refHealthService is the grpc.health.v1 service name envoyproxy/ratelimit
// reports its health under, for probes that ask for it.
const refHealthService = "ratelimit"

// loop pings the store every interval until ctx ends: SERVING while it
// answers and rules are loaded, NOT_SERVING while it does not. Each ping is bounded by half the interval, at least 100ms.
func (h *healthService) loop(ctx context.Context, ping func(context.Context) error, interval time.Duration, log *zap.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, max(interval/2, 100*time.Millisecond))
		err := ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if ok := err == nil; h.ready.set(ok) {
			h.publish()
			if ok && !h.ready.rules.Load() {
				log.Info("store reachable: not serving until the first rules come")
			} else if ok {
				log.Info("store reachable: serving")
			} else {
				log.Warn("store unreachable: not ready", zap.Error(err))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// drain says NOT_SERVING for good, so probes and Envoy move away at once.
// Neither comes back: Shutdown makes the loop's later updates no-ops, and
// closing draining makes /readyz 503 for good, even if a ping in flight
// now succeeds. drain is called once.
func (h *healthService) drain() {
	h.hs.Shutdown()
	close(h.draining)
}

// readiness is what GET /readyz reports: the health loop's last word on the
// store, once rules are loaded, until draining is closed; from then on
// false for good. Safe for concurrent use.
type readiness struct {
	store    atomic.Bool
	rules    atomic.Bool
	draining <-chan struct{}
}

// set records whether the store answered and reports whether that changed.
func (r *readiness) set(ok bool) (changed bool) { return r.store.Swap(ok) != ok }

// Ready reports whether rules are loaded, the store answered the last
// ping and draining has not begun.
func (r *readiness) Ready() bool {
	select {
	case <-r.draining:
		return false
	default:
		return r.store.Load() && r.rules.Load()
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
