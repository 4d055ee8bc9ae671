package xds

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
)

// Options configure a Client. ServerURL, DialOptions and Apply are
// required.
type Options struct {
	// ServerURL is the xDS server's gRPC target, such as "localhost:18000".
	ServerURL string
	// NodeID is the node the server keys its snapshots by; "" sends none.
	NodeID string
	// NodeMetadata is the node's metadata; nil sends none.
	NodeMetadata *structpb.Struct
	// Headers are sent as gRPC metadata on each stream.
	Headers map[string]string
	// DialOptions dial the server and must carry its transport
	// credentials (insecure ones for plaintext): the Client adds none, so
	// it never falls back to plaintext on its own.
	DialOptions []grpc.DialOption
	// MaxRecvMsgSize bounds a response, in bytes; 0 is gRPC's default,
	// 4 MiB.
	MaxRecvMsgSize int
	// Backoff spaces reconnections.
	Backoff Backoff
	// Apply installs a push's rules once they compiled cleanly;
	// Server.SetRules fits. It is never called with nil.
	Apply func(*rules.Set)
	// MergeDomains merges resources of one domain, as files with
	// rules.Options.MergeDomains; else two resources of one domain are a
	// bad push.
	MergeDomains bool
	// Defaults fill in what the proto cannot carry; nil fills nothing.
	Defaults *Defaults
	// OnUpdate is told the outcome of every push, nil when its rules are
	// served; metrics.Recorder.ObserveReload fits. nil tells nothing.
	OnUpdate func(err error)
	// Logger gets a line per push and per reconnection; default none.
	Logger *zap.Logger
	// Now stamps the status; default time.Now.
	Now func() time.Time
}

// Client subscribes to RateLimitConfig resources over xDS state of the
// world, with go-control-plane's ADS client, and applies each push whose
// rules compile: it is ACKed. A push that does not compile is NACKed with
// its problems as error_detail, and the rules last applied keep serving.
// When the stream breaks it dials again after a backoff, for ever, the
// last good rules serving meanwhile. Its methods are safe for concurrent
// use.
type Client struct {
	o      Options
	log    *zap.Logger
	node   *corev3.Node
	status atomic.Pointer[Status]
}

// Status is what a Client knows of its subscription.
type Status struct {
	Server string `json:"server"`
	NodeID string `json:"node_id"`
	// Connected is whether a stream is open and has had a response.
	Connected bool `json:"connected"`
	// Version is the version_info of the push being served; "" before
	// the first.
	Version string `json:"version"`
	// LastUpdate is when the push being served was applied; zero before.
	LastUpdate time.Time `json:"last_update,omitzero"`
	// Resources are the push's resources, as GET /rules names their
	// domains' source ("xds:" and the name).
	Resources []Resource `json:"resources"`
	// LastNack is the last push refused; nil once a later one is applied.
	LastNack *Nack `json:"last_nack"`
	// LastStreamError is why the last stream ended; "" while none has.
	LastStreamError string `json:"last_stream_error,omitempty"`
	// EndedStreams counts the streams that ended in a row since the last
	// one that brought a push (which counts too): 0 while a stream is
	// answering, and above 1 while the server is unreachable.
	EndedStreams int `json:"ended_streams"`
}

// Resource is one RateLimitConfig of a push.
type Resource struct {
	Name   string `json:"name"`
	Domain string `json:"domain"`
}

// Nack is a push that was refused.
type Nack struct {
	Time    time.Time `json:"time"`
	Version string    `json:"version"`
	Err     string    `json:"error"`
}

// New returns a Client for o; it connects on Run.
func New(o Options) (*Client, error) {
	switch {
	case o.ServerURL == "":
		return nil, errors.New("xds: Options.ServerURL is empty")
	case len(o.DialOptions) == 0:
		return nil, errors.New("xds: Options.DialOptions is empty: give the transport credentials")
	case o.Apply == nil:
		return nil, errors.New("xds: Options.Apply is nil")
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Backoff = o.Backoff.withDefaults()
	c := &Client{o: o, log: o.Logger, node: &corev3.Node{Id: o.NodeID, Metadata: o.NodeMetadata}}
	c.status.Store(&Status{Server: o.ServerURL, NodeID: o.NodeID, Resources: []Resource{}})
	return c, nil
}

// Status returns what the Client knows of its subscription.
func (c *Client) Status() Status { return *c.status.Load() }

// RulesStatus is Status as GET /rules shows it beside the rules: "xds",
// and, as for files, "last_reload" (absent before the first push
// applied) and "last_reload_error" (the last NACK, null once a later push
// is applied). It fits httpapi.Options.RulesStatus.
func (c *Client) RulesStatus() map[string]any {
	st := c.Status()
	out := map[string]any{"xds": st, "last_reload_error": st.LastNack}
	if !st.LastUpdate.IsZero() {
		out["last_reload"] = st.LastUpdate
	}
	return out
}

// update changes the status with fn, on a copy; only Run's goroutine
// calls it.
func (c *Client) update(fn func(*Status)) {
	st := *c.status.Load()
	fn(&st)
	c.status.Store(&st)
}

// Run subscribes until ctx ends, dialling again after each broken stream,
// and returns nil then.
func (c *Client) Run(ctx context.Context) error {
	attempt := 0
	for {
		answered, err := c.stream(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if answered {
			attempt = 0
		}
		d := c.o.Backoff.delay(attempt, rand.Float64())
		attempt++
		c.update(func(st *Status) { st.Connected, st.LastStreamError, st.EndedStreams = false, err.Error(), attempt })
		c.log.Warn("xDS stream ended; the last good rules keep serving", zap.String("server", c.o.ServerURL),
			zap.Error(err), zap.Duration("retry_in", d))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// stream dials the server and handles its pushes until the stream
// breaks, which is the error; answered is whether a push came.
func (c *Client) stream(ctx context.Context) (answered bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(c.o.Headers) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, metadata.New(c.o.Headers))
	}
	// The ADS client hands over a push's resources only; the version
	// comes from the response itself, caught on its way in.
	var version string
	opts := append(c.o.DialOptions[:len(c.o.DialOptions):len(c.o.DialOptions)],
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
			streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			return versionStream{ClientStream: s, version: &version}, err
		}))
	if c.o.MaxRecvMsgSize > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.o.MaxRecvMsgSize)))
	}
	conn, err := grpc.NewClient(c.o.ServerURL, opts...)
	if err != nil {
		return false, fmt.Errorf("xds: dial %s: %w", c.o.ServerURL, err)
	}
	defer conn.Close()
	// A new ADS client per stream: its ACK state belongs to the stream,
	// and a restarted server knows nothing of the old one's nonces.
	ads := sotw.NewADSClient(ctx, c.node, rules.ProtoTypeURL)
	if err := ads.InitConnect(conn); err != nil {
		return false, fmt.Errorf("xds: subscribe at %s: %w", c.o.ServerURL, err)
	}
	// The refused version and why, for when the server sends it again.
	var nacked string
	var nackErr error
	for {
		resp, err := ads.Fetch()
		if err != nil {
			return answered, fmt.Errorf("xds: receive from %s: %w", c.o.ServerURL, err)
		}
		if !answered {
			answered = true
			c.update(func(st *Status) { st.Connected, st.EndedStreams = true, 0 })
			c.log.Info("xDS stream open", zap.String("server", c.o.ServerURL), zap.String("node_id", c.o.NodeID))
		}
		if version != "" && version == nacked {
			// go-control-plane's snapshot cache answers a NACK with the
			// same snapshot at once (the NACK names an older version), so
			// refusing it at once again would spin. Within one stream a
			// version is one snapshot: refuse it again after a pause.
			t := time.NewTimer(renackDelay)
			select {
			case <-ctx.Done():
				t.Stop()
				return answered, ctx.Err()
			case <-t.C:
			}
			if err := ads.Nack(nackErr.Error()); err != nil {
				return answered, fmt.Errorf("xds: nack to %s: %w", c.o.ServerURL, err)
			}
			continue
		}
		if err := c.push(resp.Resources, version); err != nil {
			nacked, nackErr = version, err
			if err := ads.Nack(err.Error()); err != nil {
				return answered, fmt.Errorf("xds: nack to %s: %w", c.o.ServerURL, err)
			}
			continue
		}
		if err := ads.Ack(); err != nil {
			return answered, fmt.Errorf("xds: ack to %s: %w", c.o.ServerURL, err)
		}
	}
}

// renackDelay is how long a Client waits before it refuses again a
// version it has refused on the same stream.
const renackDelay = time.Second

// versionStream records the version_info of each response received.
type versionStream struct {
	grpc.ClientStream
	version *string
}

func (s versionStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if r, ok := m.(*discoveryv3.DiscoveryResponse); ok && err == nil {
		*s.version = r.GetVersionInfo()
	}
	return err
}

// push compiles a push's resources and applies them, or returns why not.
func (c *Client) push(resources []*anypb.Any, version string) error {
	set, res, err := c.compile(resources)
	now := c.o.Now()
	if err != nil {
		c.update(func(st *Status) { st.LastNack = &Nack{Time: now, Version: version, Err: err.Error()} })
		c.log.Error("xDS push refused (NACK); the last good rules keep serving", zap.String("version", version), zap.Error(err))
		if c.o.OnUpdate != nil {
			c.o.OnUpdate(err)
		}
		return err
	}
	c.o.Apply(set)
	c.update(func(st *Status) {
		st.Version, st.LastUpdate, st.Resources, st.LastNack = version, now, res, nil
	})
	c.log.Info("rules loaded from xDS", zap.String("version", version), zap.Strings("domains", set.Domains()))
	if c.o.OnUpdate != nil {
		c.o.OnUpdate(nil)
	}
	return nil
}

// byName sorts a push's files and resources together by resource name.
type byName struct {
	files []*rules.File
	res   []Resource
}

func (b byName) Len() int           { return len(b.res) }
func (b byName) Less(i, j int) bool { return b.res[i].Name < b.res[j].Name }
func (b byName) Swap(i, j int) {
	b.files[i], b.files[j] = b.files[j], b.files[i]
	b.res[i], b.res[j] = b.res[j], b.res[i]
}

// compile decodes and compiles a push: every resource must be a
// RateLimitConfig, and all must compile together.
func (c *Client) compile(resources []*anypb.Any) (*rules.Set, []Resource, error) {
	files := make([]*rules.File, 0, len(resources))
	res := make([]Resource, 0, len(resources))
	var errs []error
	for i, a := range resources {
		var cfg rlsconfv3.RateLimitConfig
		if err := a.UnmarshalTo(&cfg); err != nil {
			errs = append(errs, fmt.Errorf("resource %d (%s): %w", i, a.GetTypeUrl(), err))
			continue
		}
		name := cfg.GetName()
		if name == "" {
			name = cfg.GetDomain()
		}
		f := rules.FromProto(source(name), &cfg)
		c.o.Defaults.Apply(f)
		files = append(files, f)
		res = append(res, Resource{Name: name, Domain: cfg.GetDomain()})
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	// In name order, so that a push's rules and problems read the same
	// whatever order the server sent them in.
	sort.Sort(byName{files, res})
	set, err := rules.Options{MergeDomains: c.o.MergeDomains}.Compile(files)
	return set, res, err
}

// source is the name of a resource's File, which GET /rules shows as the
// domain's "file": "xds:" and the resource's name (its domain when it has
// none).
func source(name string) string { return "xds:" + name }
