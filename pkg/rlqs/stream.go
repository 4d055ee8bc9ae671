package rlqs

import (
	"context"
	"fmt"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"go.uber.org/zap"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// stream is the state of one Envoy's stream: its domain, from the first
// report, and the buckets it reported. Only the goroutine serving the
// stream touches it.
type stream struct {
	s       *Server
	client  string // the ledger's name for this stream
	domain  string // "" until the first report
	buckets map[string]*streamBucket
	logged  [numRefusals]bool // a refusal is logged once per stream, and counted always
	// timer fires at the earliest bucket's push (streamBucket.pushAt) or
	// re-check (streamBucket.recheckAt); nil when none is due.
	timer Timer
}

func newStream(s *Server, client string) *stream {
	return &stream{s: s, client: client, buckets: make(map[string]*streamBucket)}
}

// close gives the stream's buckets back to the gauges and stops its timer.
func (st *stream) close() {
	st.s.obs.Buckets(-len(st.buckets))
	st.stopTimer()
}

func (st *stream) stopTimer() {
	if st.timer != nil {
		st.timer.Stop()
		st.timer = nil
	}
}

// serve reads reports and answers each until the stream ends, the server
// drains or a report is invalid; it also pushes the assignments that
// become due between reports (a spent window that resets, a share that
// grows once others' decreases have reached their Envoys). It is the only
// goroutine that sends on the stream.
//
// Recv blocks until a message or the stream's end, so a goroutine reads
// and hands messages over; it ends when the stream does, which gRPC brings
// about when this handler returns, and Server.Wait waits for it.
func (st *stream) serve(ctx context.Context, stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	reports := make(chan *rlqsv3.RateLimitQuotaUsageReports)
	recvErr := make(chan error, 1)
	st.s.readers.Add(1)
	go func() {
		defer st.s.readers.Done()
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reports <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		var due <-chan time.Time
		if st.timer != nil {
			due = st.timer.C()
		}
		var resp *rlqsv3.RateLimitQuotaResponse
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-st.s.drained:
			return ErrDraining
		case err := <-recvErr:
			return err
		case m := <-reports:
			var err error
			if resp, err = st.report(ctx, m); err != nil {
				return err
			}
		case <-due:
			st.timer = nil
			resp = st.push(ctx, st.s.now())
		}
		if len(resp.GetBucketAction()) > 0 {
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
		st.arm()
	}
}

// arm sets the timer to the earliest push or re-check due among the
// buckets, on the server's clock (Options.TimerAt).
func (st *stream) arm() {
	var next time.Time
	for _, b := range st.buckets {
		next = earliest(earliest(next, b.pushAt), b.recheckAt)
	}
	st.stopTimer()
	if !next.IsZero() {
		st.timer = st.s.timerAt(next)
	}
}

// push returns the assignments due at now, so Envoy need not wait for its
// next report: the buckets due a re-check (Share.Recheck) get their new
// share when it changed; the buckets denied because a window was spent,
// whose windows have reset, get the assignment they hold otherwise.
func (st *stream) push(ctx context.Context, now time.Time) *rlqsv3.RateLimitQuotaResponse {
	resp := &rlqsv3.RateLimitQuotaResponse{}
	ctx, cancel := context.WithTimeout(ctx, st.s.timeout)
	defer cancel()
	// The re-checks first, all in one ledger call: for a bucket still
	// denied by a spent window they only update what the reset pushes.
	resp.BucketAction = st.recheckAll(ctx, now, resp.BucketAction)
	for _, b := range st.buckets {
		if b.pushAt.IsZero() || b.pushAt.After(now) {
			continue
		}
		b.pushAt = time.Time{}
		if a := b.send(&b.next, now); a != nil {
			resp.BucketAction = append(resp.BucketAction, a)
			st.s.obs.Assignment(st.domainLabel(), b.next.kind)
		}
	}
	return resp
}

// domainLabel is the stream's domain as a metric label: "unknown" when no
// rules name it, since a client may send any.
func (st *stream) domainLabel() string {
	if st.s.counters.Rules().Domain(st.domain) == nil {
		return unknownDomain
	}
	return st.domain
}

const unknownDomain = "unknown"

// report handles one message: checks each usage, matches its bucket,
// charges every reported admission in one store call, and answers every
// accepted bucket. It fails only for a message that ends the stream.
func (st *stream) report(ctx context.Context, m *rlqsv3.RateLimitQuotaUsageReports) (*rlqsv3.RateLimitQuotaResponse, error) {
	if st.s.tracer != nil {
		return st.tracedReport(ctx, m)
	}
	return st.handle(ctx, m)
}

func (st *stream) handle(ctx context.Context, m *rlqsv3.RateLimitQuotaUsageReports) (*rlqsv3.RateLimitQuotaResponse, error) {
	now := st.s.now()
	ctx, cancel := context.WithTimeout(ctx, st.s.timeout)
	defer cancel()
	switch {
	case st.domain == "" && m.GetDomain() == "":
		st.refuse(RefusedNoDomain, nil)
		return nil, fmt.Errorf("%w: the first report has no domain", ErrInvalidReport)
	case st.domain == "":
		st.domain = m.GetDomain()
	case m.GetDomain() != "" && m.GetDomain() != st.domain:
		st.refuse(RefusedDomainChanged, nil)
		return nil, fmt.Errorf("%w: domain %q on a stream of domain %q; open a new stream", ErrInvalidReport, m.GetDomain(), st.domain)
	}
	set := st.s.counters.Rules()
	dom := set.Domain(st.domain)
	label := st.domain
	if dom == nil {
		label = unknownDomain
	}
	n := len(m.GetBucketQuotaUsages())
	var (
		// Sized for the usual one limit a bucket, so that a report of
		// hundreds of buckets does not grow them step by step.
		work = make([]*usage, 0, n)
		reqs = make([]window.Counter, 0, n)
		seen = make(map[string]bool, n)
	)
	for _, u := range m.GetBucketQuotaUsages() {
		w, why := st.accept(now, u, seen)
		if why != accepted {
			st.refuse(why, u)
			continue
		}
		rule := w.b.match(dom, st.s.counters, st.domain)
		w.limits = rule.limits
		w.first = len(reqs)
		for i, l := range w.limits {
			if l.Unlimited {
				continue
			}
			c := rule.counters[i]
			// Envoy admitted these already: count them whether or not
			// they fit, and never let the counter deny (it only tells
			// whether the budget is spent).
			c.Hits, c.Charge, c.Shadow = w.allowed, true, true
			reqs = append(reqs, c)
		}
		if len(w.limits) == 0 {
			st.s.obs.Usage(label, nil, w.allowed, w.denied)
		}
		for _, l := range w.limits {
			st.s.obs.Usage(label, l, w.allowed, w.denied)
		}
		work = append(work, w)
	}
	res := make([]window.Result, len(reqs))
	var err error
	if len(reqs) > 0 {
		_, err = st.s.store.Take(ctx, now, reqs, res)
		st.s.storeState(err)
	}
	resp := &rlqsv3.RateLimitQuotaResponse{}
	taken := takeResult{reqs: reqs, res: res, err: err}
	st.assign(ctx, now, work, &taken)
	for _, w := range work {
		d := st.decide(now, w, &taken)
		if a := w.b.send(&d, now); a != nil {
			resp.BucketAction = append(resp.BucketAction, a)
			st.s.obs.Assignment(label, d.kind)
		}
	}
	return resp, nil
}

// refuse counts a refusal, and logs its first on the stream: a client
// that sends the same bad usage every 5 s would flood the log.
func (st *stream) refuse(why Refusal, u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) {
	st.s.obs.Refused(why)
	if st.logged[why] {
		return
	}
	st.logged[why] = true
	st.s.log.Warn("rlqs: usage refused; further refusals of this reason on this stream are only counted",
		zap.String("reason", why.String()), zap.String("client", st.client), zap.String("domain", st.domain),
		zap.Int("bucket_entries", len(u.GetBucketId().GetBucket())))
}
