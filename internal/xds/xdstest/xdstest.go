// Package xdstest runs a real go-control-plane xDS server with a snapshot
// cache, as Envoy Gateway's rate limit runner does, for tests of rules
// over xDS: it pushes RateLimitConfig snapshots and records what clients
// ACK and NACK. It serves in plaintext, or with mutual TLS as Envoy
// Gateway's server does (StartTLS).
package xdstest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/tlstest"
)

// Server is an xDS server on the loopback serving one node's snapshots.
// It is stopped when the test ends, or by Stop. Safe for concurrent use.
type Server struct {
	// Addr is the host:port it listens on.
	Addr string

	tb     testing.TB
	nodeID string
	cache  cachev3.SnapshotCache
	grpc   *grpc.Server
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	version int
	nonces  map[string]string // response nonce -> version sent
	acks    map[string]bool   // versions ACKed
	nacks   map[string]string // version -> error_detail message
	headers []metadata.MD     // of each stream opened
	nodes   []string          // node ids of the requests
	serials []*big.Int        // of the client certificates of the streams opened
}

// Start starts a Server on a free port of 127.0.0.1 for nodeID.
func Start(tb testing.TB, nodeID string) *Server { return StartAt(tb, "127.0.0.1:0", nodeID) }

// StartAt starts a Server on addr, such as a stopped Server's Addr to
// restart it; its snapshot versions count from 1 again, as a restarted
// control plane's do.
func StartAt(tb testing.TB, addr, nodeID string) *Server {
	tb.Helper()
	return start(tb, addr, nodeID, nil)
}

// StartTLS starts a Server on a free port of 127.0.0.1 for nodeID that
// serves only mutual TLS, as Envoy Gateway's rate limit xDS server does:
// TLS 1.3, cert its certificate, and every client must present a
// certificate that clientCA issued.
func StartTLS(tb testing.TB, nodeID string, cert *tlstest.Leaf, clientCA *tlstest.CA) *Server {
	tb.Helper()
	return StartTLSAt(tb, "127.0.0.1:0", nodeID, cert, clientCA)
}

// StartTLSAt is StartTLS on addr, such as a stopped Server's Addr.
func StartTLSAt(tb testing.TB, addr, nodeID string, cert *tlstest.Leaf, clientCA *tlstest.CA) *Server {
	tb.Helper()
	kp, err := tls.X509KeyPair(cert.CertPEM, cert.KeyPEM)
	if err != nil {
		tb.Fatalf("xdstest: key pair: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(clientCA.Cert)
	return start(tb, addr, nodeID, &tls.Config{
		Certificates: []tls.Certificate{kp},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS13,
	})
}

// start starts a Server on addr, plaintext when cfg is nil.
func start(tb testing.TB, addr, nodeID string, cfg *tls.Config) *Server {
	tb.Helper()
	var lis net.Listener
	var err error
	// The port of a server just stopped may take a moment to be free.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if lis, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		tb.Fatalf("xdstest: listen %s: %v", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{Addr: lis.Addr().String(), tb: tb, nodeID: nodeID, cancel: cancel, done: make(chan struct{}),
		nonces: map[string]string{}, acks: map[string]bool{}, nacks: map[string]string{}}
	s.cache = cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	var opts []grpc.ServerOption
	if cfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	s.grpc = grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(s.grpc, serverv3.NewServer(ctx, s.cache, serverv3.CallbackFuncs{
		StreamOpenFunc:     s.onOpen,
		StreamRequestFunc:  s.onRequest,
		StreamResponseFunc: s.onResponse,
	}))
	go func() { defer close(s.done); s.grpc.Serve(lis) }()
	tb.Cleanup(s.Stop)
	return s
}

// Stop stops the server, closing its streams; a second call does nothing.
func (s *Server) Stop() {
	s.cancel()
	s.grpc.Stop()
	<-s.done
}

func (s *Server) onOpen(ctx context.Context, _ int64, _ string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.headers = append(s.headers, md)
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			s.serials = append(s.serials, ti.State.PeerCertificates[0].SerialNumber)
		}
	}
	return nil
}

func (s *Server) onRequest(_ int64, req *discoveryv3.DiscoveryRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes = append(s.nodes, req.GetNode().GetId())
	v, ok := s.nonces[req.GetResponseNonce()]
	if !ok {
		return nil // the first request of a stream
	}
	if d := req.GetErrorDetail(); d != nil {
		s.nacks[v] = d.GetMessage()
	} else if req.GetVersionInfo() == v {
		s.acks[v] = true
	}
	return nil
}

func (s *Server) onResponse(_ context.Context, _ int64, _ *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nonces[resp.GetNonce()] = resp.GetVersionInfo()
}

// Push sets a snapshot of configs, under the next version, and returns
// the version.
func (s *Server) Push(configs ...*rlsconfv3.RateLimitConfig) string {
	s.tb.Helper()
	s.mu.Lock()
	s.version++
	v := fmt.Sprint(s.version)
	s.mu.Unlock()
	res := make([]types.Resource, len(configs))
	for i, c := range configs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(v, map[resourcev3.Type][]types.Resource{resourcev3.RateLimitConfigType: res})
	if err != nil {
		s.tb.Fatalf("xdstest: snapshot: %v", err)
	}
	if err := s.cache.SetSnapshot(context.Background(), s.nodeID, snap); err != nil {
		s.tb.Fatalf("xdstest: set snapshot: %v", err)
	}
	return v
}

// WaitAck waits until a client ACKs version.
func (s *Server) WaitAck(version string, timeout time.Duration) {
	s.tb.Helper()
	s.wait(timeout, "an ACK of version "+version, func() bool { return s.acks[version] })
}

// WaitNack waits until a client NACKs version and returns its
// error_detail message.
func (s *Server) WaitNack(version string, timeout time.Duration) string {
	s.tb.Helper()
	var msg string
	s.wait(timeout, "a NACK of version "+version, func() bool {
		var ok bool
		msg, ok = s.nacks[version]
		return ok
	})
	return msg
}

// Acked reports whether version was ACKed.
func (s *Server) Acked(version string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acks[version]
}

// Header returns the values of the gRPC metadata key on the streams
// opened so far.
func (s *Server) Header(key string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, md := range s.headers {
		out = append(out, md.Get(key)...)
	}
	return out
}

// ClientSerials returns the serial numbers of the client certificates
// presented on the streams opened so far, in order; none in plaintext.
func (s *Server) ClientSerials() []*big.Int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*big.Int(nil), s.serials...)
}

// Nodes returns the node ids of the requests so far.
func (s *Server) Nodes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.nodes...)
}

func (s *Server) wait(timeout time.Duration, what string, cond func() bool) {
	s.tb.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(10 * time.Millisecond) {
		s.mu.Lock()
		ok := cond()
		s.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.tb.Fatalf("xdstest: no %s within %v (acks %v, nacks %v)", what, timeout, s.acks, s.nacks)
		}
	}
}

// EnvoyGatewayConfig is a RateLimitConfig shaped as Envoy Gateway
// generates one: the domain is the listener, the resource is named after
// it, and each route's descriptor (key and value the route's name) holds
// its rules' descriptors, the limit on the innermost. Here route "route"
// limits each value of header x-user to n per unit.
func EnvoyGatewayConfig(listener string, n uint32, unit rlsconfv3.RateLimitUnit) *rlsconfv3.RateLimitConfig {
	route := "httproute/default/route/rule/0"
	return &rlsconfv3.RateLimitConfig{Name: listener, Domain: listener, Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: route, Value: route,
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key:       "rule-0-match-0",
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: n},
		}},
	}}}
}

// EnvoyGatewayEntries are the descriptor entries Envoy sends for
// EnvoyGatewayConfig's route and a user.
func EnvoyGatewayEntries(user string) [][2]string {
	route := "httproute/default/route/rule/0"
	return [][2]string{{route, route}, {"rule-0-match-0", user}}
}
