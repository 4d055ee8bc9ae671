package envoyrls

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rules"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// InputLimits caps what one request may ask, so hostile input costs bounded
// work. A zero field takes its default.
type InputLimits struct {
	MaxDescriptors int    // per request; default 256, Envoy Gateway's most rules in a policy
	MaxEntries     int    // per descriptor; default 32
	MaxEntryBytes  int    // per entry key or value; default 1024
	MaxHits        uint64 // per descriptor; default 1<<32 - 1
}

func (l InputLimits) withDefaults() InputLimits {
	if l.MaxDescriptors <= 0 {
		l.MaxDescriptors = 256
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = 32
	}
	if l.MaxEntryBytes <= 0 {
		l.MaxEntryBytes = 1024
	}
	if l.MaxHits == 0 {
		l.MaxHits = 1<<32 - 1
	}
	return l
}

// Options configure a Server. Store is required; every other field has a
// default.
type Options struct {
	// Store checks and counts the counters of each request atomically:
	// *window.Memory or *redisstore.Store, possibly wrapped
	// (window.OverLimitCache, window.Breaker). A store that waits on
	// anything bounds its Takes itself (see redisstore.Options), and returns
	// by ctx's deadline: the server applies failure modes to what it
	// returns and must still answer before its caller gives up.
	Store window.Store
	// Rules to serve at start; nil serves none (every descriptor is OK)
	// until SetRules.
	Rules *rules.Set
	// KeyPrefix starts every counter key; default "ratelimit".
	KeyPrefix string
	// Now is the clock for window arithmetic, read once per request;
	// default time.Now.
	Now    func() time.Time
	Limits InputLimits
	Logger *zap.Logger // default no logging
	// Observer is told decisions and store calls (see Observer), for
	// metrics; nil observes nothing.
	Observer Observer
	// NearLimitRatio makes an allowed decision OutcomeNearLimit when the
	// hits counted exceed the limit (a token bucket's burst) times it,
	// rounded down, as
	// envoyproxy/ratelimit's NEAR_LIMIT_RATIO; 0 is its default, 0.8.
	NearLimitRatio float64
	// ShadowMode is envoyproxy/ratelimit's SHADOW_MODE: every limit is
	// counted even when over (as a shadow_mode limit is), statuses still
	// say OVER_LIMIT where a limit is over, and the overall answer is OK,
	// with no 429 parts. It also overrides failure_mode: deny.
	ShadowMode bool
	// QuotaMode is envoyproxy/ratelimit's QUOTA_MODE: every limit is in
	// quota mode, as if each descriptor set quota_mode (see
	// rules.Limit.QuotaMode and quotaMode).
	QuotaMode bool
	// DynamicMetadata is envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA:
	// the response's dynamic_metadata describes the request (domain,
	// descriptors, hits) and its quota-mode limits, with the metadata of
	// the rules that applied merged in (see dynamicMetadata). Off, nothing
	// is built.
	DynamicMetadata bool
	// Tracer makes a span of each ShouldRateLimit request (see trace.go),
	// the child of any span ctx carries, and hands the store the context
	// holding it. Nil (the default) makes none and costs nothing.
	Tracer trace.Tracer
	// ReferenceKeys, when not nil, keeps the counters of the limits that
	// envoyproxy/ratelimit can express (fixed windows of one unit, the
	// first limit of a descriptor) in its Redis keys and counts them as it
	// does with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true, so both
	// servers share them during a migration. Other limits keep this
	// project's keys. Nil (the default) keeps every counter in this
	// project's keys.
	ReferenceKeys *ReferenceKeys
	// MaxConcurrent caps the ShouldRateLimit calls in progress at once,
	// as envoyproxy/ratelimit's MAX_CONCURRENT_REQUESTS: a call over it is
	// refused at once with ErrOverloaded (gRPC ResourceExhausted), never
	// queued, before any store work; an admitted call keeps its slot until
	// its last store call returns. 0 (the default) caps nothing; below 0
	// is an error. RLQS streams (pkg/rlqs) are not counted.
	MaxConcurrent int
}

// Server answers ShouldRateLimit. It is safe for concurrent use; rules can be
// swapped while it serves.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer

	store   window.Store
	served  atomic.Pointer[served] // the rules, with what is prepared for them
	prefix  string
	now     func() time.Time
	limits  InputLimits
	log     *zap.Logger
	obs     Observer
	near    float64        // NearLimitRatio
	shadow  bool           // Options.ShadowMode
	quota   bool           // Options.QuotaMode
	meta    bool           // Options.DynamicMetadata
	tracer  trace.Tracer   // nil: no spans
	ref     *ReferenceKeys // nil: this project's keys only
	failing atomic.Bool    // the last store call failed; for transition logs
	slots   chan struct{}  // one per ShouldRateLimit call admitted; nil: no cap
	scratch sync.Pool      // of *scratch
}

// NewServer returns a Server, or an error for bad options.
func NewServer(o Options) (*Server, error) {
	if o.Store == nil {
		return nil, fmt.Errorf("envoyrls: Options.Store is nil")
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = "ratelimit"
	}
	if err := window.CheckPrefix(o.KeyPrefix); err != nil {
		return nil, err
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.NearLimitRatio == 0 {
		o.NearLimitRatio = 0.8
	}
	if o.NearLimitRatio < 0 || o.NearLimitRatio > 1 {
		return nil, fmt.Errorf("envoyrls: Options.NearLimitRatio %v: want 0 to 1", o.NearLimitRatio)
	}
	if o.MaxConcurrent < 0 {
		return nil, fmt.Errorf("envoyrls: Options.MaxConcurrent %d: want 0 (no cap) or more", o.MaxConcurrent)
	}
	s := &Server{
		store:  o.Store,
		prefix: o.KeyPrefix,
		now:    o.Now,
		limits: o.Limits.withDefaults(),
		log:    o.Logger,
		obs:    o.Observer,
		near:   o.NearLimitRatio,
		shadow: o.ShadowMode,
		quota:  o.QuotaMode,
		meta:   o.DynamicMetadata,
		tracer: o.Tracer,
		ref:    o.ReferenceKeys,
	}
	if o.MaxConcurrent > 0 {
		s.slots = make(chan struct{}, o.MaxConcurrent)
	}
	s.scratch.New = func() any { return new(scratch) }
	s.SetRules(o.Rules)
	return s, nil
}

// SetRules swaps the rules atomically: each request sees either the old or
// the new rules, never a mix, and the response parts prepared for them
// (see served). Nil serves none.
func (s *Server) SetRules(r *rules.Set) { s.served.Store(newServed(r)) }

// Rules returns the rules being served, or nil.
func (s *Server) Rules() *rules.Set { return s.served.Load().rules }

// Ping checks the store.
func (s *Server) Ping(ctx context.Context) error { return s.store.Ping(ctx) }

// scratch is the working state of one request, pooled to spare allocations.
// limits and owner list every matched limit and its descriptor's index; reqs
// and res hold only the counted ones, slot[k] being limit k's index in them
// or -1 for an unlimited limit.
type scratch struct {
	domain  string  // metric label: the domain, or "unknown" when no rules name it
	served  *served // the rules the request is decided by
	failed  []bool  // per slot: the store failed for it, so its result is unknown; empty unless a store call failed
	counted bool    // the store counted the request's hits (it was allowed)
	limits  []*rules.Limit
	owner   []int
	slot    []int
	reqs    []window.Counter
	res     []window.Result
	key     []byte // the keys of one descriptor's counters, end to end
	keyEnds []int  // where each of them ends in key
	// quotaOver lists, in increasing order and possibly repeated, the
	// descriptors of which a quota-mode limit was over.
	quotaOver []int
	// quota is, per descriptor, what its quota-mode limits say (see
	// quotaState); empty when no limit of the request is in quota mode.
	// quotaWait and quotaLimit are, for a spent descriptor, the longest
	// retry-after wait among its quota limits over and that limit.
	quota      []quotaState
	quotaWait  []time.Duration
	quotaLimit []*rules.Limit
	// refunded: the counted hits that are not charges were given back.
	refunded bool
}

// quotaState is what a descriptor's quota-mode limits say of it.
type quotaState uint8

const (
	quotaNone  quotaState = iota // no quota-mode limit
	quotaRoom                    // quota-mode limits, none over
	quotaSpent                   // a quota-mode limit over
)

// markQuota records that quota-mode limit l of descriptor i (of n) is
// over, with wait its retry-after, or not: a descriptor is spent when any
// of its quota limits is, as a descriptor with plain limits is over when
// any of them is, and it has room again when all of them have.
func (c *scratch) markQuota(i, n int, l *rules.Limit, spent bool, wait time.Duration) {
	for len(c.quota) < n {
		c.quota, c.quotaWait, c.quotaLimit = append(c.quota, quotaNone), append(c.quotaWait, 0), append(c.quotaLimit, nil)
	}
	switch {
	case spent:
		c.quota[i] = quotaSpent
		c.quotaOver = append(c.quotaOver, i)
		if c.quotaLimit[i] == nil || wait >= c.quotaWait[i] {
			c.quotaWait[i], c.quotaLimit[i] = wait, l
		}
	case c.quota[i] == quotaNone:
		c.quota[i] = quotaRoom
	}
}

// quotaRetry returns the retry-after of a request denied because all its
// quota descriptors are spent, and the limit that decides it: it passes
// again as soon as one of them has room, so the shortest of their waits.
func (c *scratch) quotaRetry() (time.Duration, *rules.Limit) {
	var retry time.Duration
	var worst *rules.Limit
	for i, l := range c.quotaLimit {
		if l != nil && (worst == nil || c.quotaWait[i] < retry) {
			retry, worst = c.quotaWait[i], l
		}
	}
	return retry, worst
}

// quotaSpent reports whether the request has quota descriptors and every
// one of them is spent: envoyproxy/ratelimit's rule (its #1059) for when
// quota-mode limits make a request OVER_LIMIT.
func (c *scratch) quotaSpent() bool {
	spent := false
	for _, q := range c.quota {
		if q == quotaRoom {
			return false
		}
		spent = spent || q == quotaSpent
	}
	return spent
}

// isFailed reports whether the store failed for the counter in slot i.
func (c *scratch) isFailed(i int) bool { return len(c.failed) > i && c.failed[i] }

// unknownDomain labels metrics of domains that no rules file names.
const unknownDomain = "unknown"

func (c *scratch) reset() {
	c.limits, c.owner, c.slot = c.limits[:0], c.owner[:0], c.slot[:0]
	c.reqs, c.res, c.key, c.keyEnds = c.reqs[:0], c.res[:0], c.key[:0], c.keyEnds[:0]
	c.failed, c.quotaOver = c.failed[:0], c.quotaOver[:0]
	c.quota, c.quotaWait, c.quotaLimit = c.quota[:0], c.quotaWait[:0], c.quotaLimit[:0]
	c.counted, c.refunded = false, false
}

// ShouldRateLimit decides a request: one status per descriptor, in order.
// Malformed requests get InvalidArgument and count nothing; a failed store
// gets each limit's failure mode. Responses share read-only parts that the
// server prepared per limit (current_limit, the 429 body and headers) and
// the rules' metadata: callers must not modify a response. With Options.Tracer it makes a span.
// With Options.MaxConcurrent, a call over the cap gets ResourceExhausted at
// once, before it is read or traced, as envoyproxy/ratelimit refuses it.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if s.slots != nil {
		if err := s.admit(); err != nil {
			return nil, grpcError(err)
		}
		defer s.release()
	}
	if s.tracer != nil {
		return s.tracedDecide(ctx, req)
	}
	return s.decide(ctx, req)
}

// decide is ShouldRateLimit without its span.
func (s *Server) decide(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	now := s.now()
	if err := s.validate(req); err != nil {
		return nil, s.invalid(err)
	}
	v := s.served.Load()
	dom := v.rules.Domain(req.Domain)
	c := s.scratch.Get().(*scratch)
	defer s.scratch.Put(c)
	c.reset()
	c.served = v
	c.domain = unknownDomain
	if dom != nil {
		// A client can send any domain (with an override, any domain even
		// counts), so only configured ones become metric labels.
		c.domain = dom.Name
	}

	for i, d := range req.Descriptors {
		matched := dom.Match(d.Entries)
		if d.Limit != nil {
			ol := overrideLimit(d.Limit, matched, dom)
			if err := checkOverride(ol, i); err != nil {
				return nil, s.invalid(err)
			}
			c.limits = append(c.limits, ol)
			c.owner = append(c.owner, i)
			continue
		}
		for _, l := range matched {
			c.limits = append(c.limits, l)
			c.owner = append(c.owner, i)
		}
	}
	c.dropReplaced()
	for k, l := range c.limits {
		if l.Unlimited {
			c.slot = append(c.slot, -1)
			continue
		}
		c.slot = append(c.slot, len(c.reqs))
		d := req.Descriptors[c.owner[k]]
		hits, refund := hitsOf(req, d)
		r := s.counterOf(l)
		r.Hits, r.Refund = hits, refund
		// Global shadow and quota-mode limits never deny, so the store
		// counts them, over or not, whenever the request is allowed.
		r.Shadow = l.Shadow || s.shadow || s.quotaMode(l)
		r.Charge = l.OverLimit == rules.OverLimitCharge && statesCost(req, d)
		c.reqs = append(c.reqs, r)
	}
	if len(c.reqs) == 0 {
		return s.response(req, c, now), nil
	}
	s.setKeys(req, c)
	for range c.reqs {
		c.res = append(c.res, window.Result{})
	}
	allowed, err := s.take(ctx, now, c)
	c.counted = allowed
	if err != nil {
		resp, err := s.failureResponse(ctx, req, c, now, allowed, err)
		return resp, grpcError(err)
	}
	if !allowed {
		s.giveBack(ctx, now, c)
	}
	resp := s.response(req, c, now)
	s.refundQuotaDenial(ctx, now, c, resp)
	return resp, nil
}

// refundQuotaDenial gives back the hits of a request that the store
// counted (its quota-mode limits never deny there, see quotaMode) and that
// response then denied because every quota descriptor of it was spent: a
// denied request consumes nothing but its charges. Between the count and
// the refund, other requests see these counters higher by this request's
// hits; the quota counters are over already, so only a plain limit of the
// same request with room left can answer differently in that instant.
func (s *Server) refundQuotaDenial(ctx context.Context, now time.Time, c *scratch, resp *rlsv3.RateLimitResponse) {
	if c.counted && !c.refunded && resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && c.quotaSpent() {
		s.refund(ctx, now, c)
	}
}

// invalid tells the Observer of a request refused as malformed and returns
// its gRPC error.
func (s *Server) invalid(err error) error {
	if s.obs != nil {
		s.obs.InvalidRequest()
	}
	return grpcError(err)
}

// quotaMode reports whether l is in quota mode. Over its limit, its
// descriptor is reported OVER_LIMIT (limit_remaining 0, and listed in
// dynamic_metadata's quotaModeViolations) but makes the request OVER_LIMIT
// only when every quota descriptor of the request is over too, as
// envoyproxy/ratelimit decides since its #1059 (see scratch.quotaSpent). The
// store counts it like a shadow limit, over or not, when the request is
// allowed there; a request that the quota rule then denies gets its
// non-charge hits back (see refundQuotaDenial).
func (s *Server) quotaMode(l *rules.Limit) bool { return s.quota || l.QuotaMode }

// hitsOf returns the descriptor's hits: its own hits_addend when present
// (0 checks without counting), else the request's, where 0 means 1.
func hitsOf(req *rlsv3.RateLimitRequest, d *rlv3.RateLimitDescriptor) (uint64, bool) {
	if d.HitsAddend != nil {
		return d.HitsAddend.Value, d.IsNegativeHits
	}
	if req.HitsAddend == 0 {
		return 1, d.IsNegativeHits
	}
	return uint64(req.HitsAddend), d.IsNegativeHits
}

// dropReplaced removes limits that another matched limit names in its
// replaces. Every limit is judged against all matched limits before any is
// removed, so the outcome does not depend on their order.
func (c *scratch) dropReplaced() {
	replacing := false
	for _, l := range c.limits {
		replacing = replacing || len(l.Replaces) > 0
	}
	if !replacing {
		return
	}
	for i, l := range c.limits {
		if c.replaced(l) {
			c.owner[i] = -1 // judged: removed below, once all are judged
		}
	}
	j := 0
	for i := range c.limits {
		if c.owner[i] >= 0 {
			c.limits[j], c.owner[j] = c.limits[i], c.owner[i]
			j++
		}
	}
	c.limits, c.owner = c.limits[:j], c.owner[:j]
}

func (c *scratch) replaced(l *rules.Limit) bool {
	if l.Name == "" {
		return false
	}
	for _, other := range c.limits {
		if other != l && slices.Contains(other.Replaces, l.Name) {
			return true
		}
	}
	return false
}

// take calls the store and logs transitions between a working and a
// failing store. The store bounds the call (see Options.Store): a context
// with a timer per request here was the largest allocation on the hot path.
func (s *Server) take(ctx context.Context, now time.Time, c *scratch) (bool, error) {
	var start time.Time
	if s.obs != nil {
		start = time.Now()
	}
	allowed, err := s.store.Take(ctx, now, c.reqs, c.res)
	// A caller that went away (Envoy timed out or reset) says nothing
	// about the store: not a store error in the metrics (a load generator
	// cancelling its calls in flight had counted as such), nor a failing
	// store in the log.
	gone := err != nil && ctx.Err() != nil
	if s.obs != nil && !gone {
		s.obs.StoreCall(time.Since(start), err)
	}
	if err != nil {
		if !gone && s.failing.CompareAndSwap(false, true) {
			s.log.Warn("store failing; applying failure modes", zap.Error(err))
		}
		return allowed, err
	}
	// Load first: a CompareAndSwap is a locked write, and this is the hot path.
	if s.failing.Load() && s.failing.CompareAndSwap(true, false) {
		s.log.Info("store recovered")
	}
	return allowed, nil
}

// giveBack applies the refunds (is_negative_hits) of a request the store
// denied, which it therefore did not count. Hits given back are not asked
// for: they return what earlier requests took (tokens reserved and not
// used), so they apply whatever the answer, as envoyproxy/ratelimit
// applies them (its #1140). Their results replace the denied call's, so
// their statuses tell the room they made.
func (s *Server) giveBack(ctx context.Context, now time.Time, c *scratch) {
	var idx []int
	for i, r := range c.reqs {
		if r.Refund && r.Hits > 0 {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return
	}
	back := make([]window.Counter, len(idx))
	res := make([]window.Result, len(idx))
	for j, i := range idx {
		back[j] = c.reqs[i]
	}
	// Even when the caller is gone: the hits were given back all the same.
	if _, err := s.store.Take(context.WithoutCancel(ctx), now, back, res); err != nil {
		s.log.Debug("refund of a denied request failed", zap.Error(err))
		return
	}
	for j, i := range idx {
		c.res[i] = res[j]
	}
}

// refund gives back the hits that a store call counted for a request that
// a failure mode, or the quota rule (refundQuotaDenial), then denied.
func (s *Server) refund(ctx context.Context, now time.Time, c *scratch) {
	c.refunded = true
	var back []window.Counter
	for i, r := range c.reqs {
		// A charge stays counted: it was spent whatever the answer.
		if !c.isFailed(i) && !c.res[i].Skipped && r.Hits > 0 && !r.Refund && !r.Charge {
			r.Refund = true
			back = append(back, r)
		}
	}
	if len(back) == 0 {
		return
	}
	// Even when the caller is gone: the hits were counted for it.
	if _, err := s.store.Take(context.WithoutCancel(ctx), now, back, make([]window.Result, len(back))); err != nil {
		s.log.Debug("refund after a failure-mode denial failed", zap.Error(err))
	}
}
