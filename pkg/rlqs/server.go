package rlqs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// Counters is what the server needs of the rules being served: the rules
// themselves, read at every report so that a reload or an xDS push applies
// at the next report, and the counter ShouldRateLimit keeps for a limit of
// a descriptor, so both protocols charge one counter. *envoyrls.Server
// implements it.
type Counters interface {
	Rules() *rules.Set
	Counter(domain string, entries []*rlv3.RateLimitDescriptor_Entry, l *rules.Limit) window.Counter
}

// UsageLimits are the sanity caps of one usage (BucketQuotaUsage): a
// usage beyond them is refused, logged and counted, and nothing of it is
// charged. A zero field takes its default.
type UsageLimits struct {
	// MaxEntries per bucket_id; default 32, as a descriptor's.
	MaxEntries int
	// MaxEntryBytes per key or value; default 1024.
	MaxEntryBytes int
	// MaxElapsed is the longest time_elapsed believed; default 1 h
	// (Envoy reports every 5 s).
	MaxElapsed time.Duration
	// MaxRate is the most requests per second one Envoy is believed to
	// decide for one bucket: allowed + denied above MaxRate × elapsed
	// (elapsed at least 1 s) is refused; default 10^7.
	MaxRate uint64
}

func (l UsageLimits) withDefaults() UsageLimits {
	if l.MaxEntries <= 0 {
		l.MaxEntries = 32
	}
	if l.MaxEntryBytes <= 0 {
		l.MaxEntryBytes = 1024
	}
	if l.MaxElapsed <= 0 {
		l.MaxElapsed = time.Hour
	}
	if l.MaxRate == 0 {
		l.MaxRate = 10_000_000
	}
	return l
}

// ReportInterval is how often Envoy 1.40 reports, whatever the bucket's
// reporting_interval says. An assignment must outlive it.
const ReportInterval = 5 * time.Second

// Defaults of Options.
const (
	DefaultTTL        = 15 * time.Second
	DefaultTimeout    = time.Second
	DefaultMaxStreams = 10_000
	DefaultMaxBuckets = 1_000
)

// Options configure a Server. Counters, Store and Ledger are required.
type Options struct {
	Counters Counters
	// Store charges the reported admissions: the store ShouldRateLimit
	// uses, with the same layers (over-limit cache, breaker).
	Store  window.Store
	Ledger Ledger
	// Now is the clock of windows and assignments, read once per report;
	// default time.Now.
	Now func() time.Time
	// TimerAt returns a timer that fires once Now reaches at: a stream's
	// pushes between reports (window resets, re-checks) wait on it. A
	// clock that tests move sets both; default a time.Timer for at minus
	// Now, so the default follows any Now that runs at the real rate.
	TimerAt func(at time.Time) Timer
	Logger  *zap.Logger // default no logging
	// Observer is told of reports, assignments, refusals, streams and
	// buckets, for metrics; nil observes nothing.
	Observer Observer
	// Tracer makes a span of each report; nil makes none.
	Tracer trace.Tracer
	// TTL is every assignment's assignment_time_to_live: whole seconds,
	// more than ReportInterval so the next report extends it before it
	// expires; default DefaultTTL.
	TTL time.Duration
	// Timeout bounds the store and ledger calls of one report (a stream
	// has no deadline of its own); default DefaultTimeout. A report is not
	// on a request's path, so it may wait longer than a ShouldRateLimit
	// call: what a late answer costs is at most its report interval.
	Timeout time.Duration
	// MaxStreams caps the streams served at once (ResourceExhausted
	// beyond); default DefaultMaxStreams.
	MaxStreams int
	// MaxBuckets caps the buckets one stream reports; a usage of a bucket
	// beyond it is refused; default DefaultMaxBuckets.
	MaxBuckets int
	Limits     UsageLimits
	// ShadowMode is envoyrls.Options.ShadowMode: every limit is charged
	// and reported, and no bucket is denied.
	ShadowMode bool
	// Replica names this server in the ledger's client names, so they are
	// unique across replicas; default random.
	Replica string
}

// Server serves envoy.service.rate_limit_quota.v3.RateLimitQuotaService.
// It is safe for concurrent use. Drain ends its streams.
type Server struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer

	counters   Counters
	store      window.Store
	ledger     Ledger
	now        func() time.Time
	timerAt    func(at time.Time) Timer
	log        *zap.Logger
	obs        Observer
	tracer     trace.Tracer
	ttl        time.Duration
	timeout    time.Duration
	maxStreams int
	maxBuckets int
	limits     UsageLimits
	shadow     bool
	replica    string

	failing   atomic.Bool   // the last charge failed; for transition logs
	streams   atomic.Int64  // served now
	seq       atomic.Uint64 // streams ever started: client names
	drainOnce sync.Once
	drained   chan struct{} // closed by Drain
	// readers counts the goroutines that read streams (see serve), so
	// Wait can wait for them.
	readers sync.WaitGroup
}

// ErrOptions reports bad Options.
var ErrOptions = errors.New("rlqs: bad options")

// New returns a Server, or an error wrapping ErrOptions.
func New(o Options) (*Server, error) {
	switch {
	case o.Counters == nil:
		return nil, fmt.Errorf("%w: Counters is nil", ErrOptions)
	case o.Store == nil:
		return nil, fmt.Errorf("%w: Store is nil", ErrOptions)
	case o.Ledger == nil:
		return nil, fmt.Errorf("%w: Ledger is nil", ErrOptions)
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if err := CheckTTL(o.TTL); err != nil {
		return nil, err
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxStreams == 0 {
		o.MaxStreams = DefaultMaxStreams
	}
	if o.MaxBuckets == 0 {
		o.MaxBuckets = DefaultMaxBuckets
	}
	if o.MaxStreams < 0 || o.MaxBuckets < 0 {
		return nil, fmt.Errorf("%w: MaxStreams %d, MaxBuckets %d: want > 0", ErrOptions, o.MaxStreams, o.MaxBuckets)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.TimerAt == nil {
		o.TimerAt = wallTimerAt(o.Now)
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	if o.Replica == "" {
		var b [6]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand)
		o.Replica = hex.EncodeToString(b[:])
	}
	return &Server{
		counters: o.Counters, store: o.Store, ledger: o.Ledger, now: o.Now, timerAt: o.TimerAt, log: o.Logger, obs: o.Observer,
		tracer: o.Tracer, ttl: o.TTL, timeout: o.Timeout, maxStreams: o.MaxStreams, maxBuckets: o.MaxBuckets,
		limits: o.Limits.withDefaults(), shadow: o.ShadowMode, replica: o.Replica,
		drained: make(chan struct{}),
	}, nil
}

// CheckTTL reports whether ttl can be an assignment's TTL: whole seconds
// (Envoy 1.40 reads only the seconds of assignment_time_to_live) and more
// than ReportInterval, so the next report extends an assignment before it
// expires.
func CheckTTL(ttl time.Duration) error {
	if ttl <= ReportInterval || ttl%time.Second != 0 {
		return fmt.Errorf("%w: assignment TTL %v: want whole seconds, more than Envoy's report interval of %v", ErrOptions, ttl, ReportInterval)
	}
	return nil
}

// StreamRateLimitQuotas serves one Envoy's stream until it ends, the
// server drains (Unavailable, so Envoy reconnects, to another replica if
// there is one) or a report is malformed (InvalidArgument). More streams
// than MaxStreams get ResourceExhausted.
func (s *Server) StreamRateLimitQuotas(stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	select {
	case <-s.drained:
		return grpcError(ErrDraining)
	default:
	}
	if n := s.streams.Add(1); n > int64(s.maxStreams) {
		s.streams.Add(-1)
		s.obs.Refused(RefusedMaxStreams)
		s.log.Warn("rlqs: stream refused", zap.Int("max_streams", s.maxStreams))
		return grpcError(fmt.Errorf("%w: more than %d streams", ErrTooMany, s.maxStreams))
	}
	s.obs.Streams(1)
	defer func() { s.streams.Add(-1); s.obs.Streams(-1) }()
	st := newStream(s, fmt.Sprintf("%s/%d", s.replica, s.seq.Add(1)))
	defer st.close()
	return grpcError(st.serve(stream.Context(), stream))
}

// Drain ends every stream with Unavailable, now and from now on, so that a
// graceful stop of the gRPC server does not wait for them: a stream never
// ends by itself. Envoy keeps its assignments until their TTL and
// reconnects at its next report. Drain is idempotent.
func (s *Server) Drain() { s.drainOnce.Do(func() { close(s.drained) }) }

// Wait waits until the goroutines reading the streams have ended. They end
// when their streams do: call it after the gRPC server has stopped.
func (s *Server) Wait() { s.readers.Wait() }

// Checking the interface here keeps a change of the generated code a
// compile error.
var _ rlqsv3.RateLimitQuotaServiceServer = (*Server)(nil)

// storeState logs the transitions between a store that charges and one
// that fails, once each, as ShouldRateLimit's server does.
func (s *Server) storeState(err error) {
	switch {
	case err != nil && s.failing.CompareAndSwap(false, true):
		s.log.Warn("rlqs: charging reported admissions failed; applying failure modes", zap.Error(err))
	case err == nil && s.failing.Load() && s.failing.CompareAndSwap(true, false):
		s.log.Info("rlqs: store recovered")
	}
}
