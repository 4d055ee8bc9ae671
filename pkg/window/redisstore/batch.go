package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// ErrBatcherClosed is returned, wrapped with window.ErrStore, for a Take on
// a batched Store after Close.
var ErrBatcherClosed = errors.New("redisstore: batcher closed")

// BatchOptions configure a batched Store (see NewBatched). Zero Workers,
// MaxBatch and Spacing take their defaults; a zero Linger sends every batch
// at once.
type BatchOptions struct {
	// Workers is the most batched script calls in flight at once; default
	// 16. How many are out follows the measured round trip (see Spacing):
	// one while Redis answers within Spacing, which makes the largest
	// batches, more when it is far away, so that a request that arrives
	// just after a batch left does not wait for it to come back (two round
	// trips) before its own goes out.
	Workers int
	// Spacing is how long the last batch sent must have been out before
	// another leaves beside it; default 1ms. While no batch is out, the
	// next leaves at once; while one is, the requests that arrive gather
	// until it comes back or until it has been out for Spacing, whichever
	// is first. So a request waits at most about Spacing before its batch
	// leaves, however far Redis is, and the calls in flight number about
	// the round trip over Spacing (at most Workers): a round trip shorter
	// than Spacing (Redis near, as on one host) keeps one call in flight
	// and the batches as large as with one worker, and a replica starts at
	// most one call per Spacing beyond those that follow a returning call.
	Spacing time.Duration
	// MaxBatch is the most requests in one script call; default 64. It
	// bounds how long one call holds Redis's single thread.
	MaxBatch int
	// Linger is how long a worker holds a batch for more requests before
	// sending it, while the store is busy: only when the batch's first
	// request was already waiting for the worker and the previous batch
	// carried more than one, so a lone request under light load is never
	// held, however busy the store was before. It never takes more than
	// half the time left to the earliest deadline in the batch when it
	// starts (a request that joins meanwhile with less time left can miss
	// its deadline and is then not sent). Larger batches cost Redis, whose one
	// thread all replicas share, less CPU per decision; each request waits
	// up to Linger longer. The worker sleeps while it lingers (requests
	// queue without waking it). Go's timers round a sleep shorter than a
	// millisecond up to about one when the process is otherwise idle, so
	// a sub-millisecond Linger can hold a batch that long. Zero (the
	// default) never holds a batch.
	Linger time.Duration
}

// Defaults of BatchOptions.
const (
	DefaultBatchWorkers = 16
	DefaultBatchSpacing = time.Millisecond
	DefaultMaxBatch     = 64
)

// NewBatched returns a Store that coalesces concurrent Takes into
// one script call: the script decides each request on its own, in order, so
// semantics are those of separate calls, but Redis runs one script
// invocation and one round trip for the whole batch. A worker takes the first
// waiting request, adds whatever else is already waiting (up to MaxBatch)
// and sends them at once: a lone request still costs exactly one round trip
// and never waits for a timer, while under load round trips per decision fall
// well below one. With BatchOptions.Linger a busy worker also waits a little
// for more requests first.
//
// On a cluster client (one with ForEachShard, MasterForKey and ReloadState)
// a batch is one script call per node, every node's at once: a batch costs
// each node it reaches one round trip (see pipeline.go). A Take whose
// counters lie on several slots of one node is one request of its node's
// call, decided at once like any other; one whose counters lie on several
// nodes sends each slot's part in the batches and gives back what was
// counted when a slot denies (see the package doc).
//
// A request whose context ended, or whose deadline (see takeDeadline) passed,
// before its batch was sent is not sent, and its caller stops waiting then,
// not when a worker gets to it: behind a slow Redis the queue holds at most
// what the callers' deadlines allow. If the call fails, every request in it
// fails, as each would alone.
//
// NewBatched fails only for negative options. Close stops the workers.
func NewBatched(client scripter, ro Options, o BatchOptions) (*Store, error) {
	if o.Workers < 0 || o.MaxBatch < 0 || o.Linger < 0 || o.Spacing < 0 {
		return nil, fmt.Errorf("redisstore: batch options %+v: want 0 (the default) or more", o)
	}
	s := New(client, ro)
	if o.Workers == 0 {
		o.Workers = DefaultBatchWorkers
	}
	if o.Spacing == 0 {
		o.Spacing = DefaultBatchSpacing
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	b := newBatcher(o)
	b.s = s
	for range o.Workers {
		b.wg.Add(1)
		go b.work()
	}
	s.batch = b
	return s, nil
}

// Close stops a batched store's workers after their current calls and fails
// the requests still waiting. It does not close the client; on an unbatched
// store it does nothing.
func (s *Store) Close() error {
	if s.batch == nil {
		return nil
	}
	return s.batch.close()
}

// newBatcher returns a batcher with o's options (defaults applied), with no
// store and no workers yet.
func newBatcher(o BatchOptions) *batcher {
	b := &batcher{opts: o, queue: make(chan *pending, o.MaxBatch*max(o.Workers, 1)), stop: make(chan struct{}),
		gather: make(chan struct{}, 1), returned: make(chan struct{}, 1)}
	b.gather <- struct{}{}
	b.calls.New = func() any {
		t := time.NewTimer(time.Hour)
		t.Stop()
		return &pending{done: make(chan struct{}, 1), timer: t}
	}
	return b
}

// A batcher's workers take turns to gather a batch: the one holding the
// gather token waits for the first request, then until the batch may leave
// (see depart), then fills it, hands the token on and sends. So one batch
// gathers at a time, and a worker in flight is one call in flight.
type batcher struct {
	s      *Store
	opts   BatchOptions
	queue  chan *pending
	mu     sync.RWMutex // guards closed against sends racing close
	closed bool
	stop   chan struct{}
	wg     sync.WaitGroup
	calls  sync.Pool

	gather   chan struct{} // holds the token while no worker gathers
	returned chan struct{} // a call came back and none is in flight: wakes the gatherer
	inFlight atomic.Int32  // script calls sent and not back
	lastSent time.Time     // when the last batch left; only the gatherer reads or writes it
}

// pending is one Take waiting in a batch.
type pending struct {
	ctx      context.Context
	deadline time.Time // of the Take (takeDeadline)
	take               // the worker reads reqs, which the caller leaves alone until done
	slot     uint16    // on a cluster: the hash slot of every counter of request, or of its first (multi)
	multi    bool      // on a cluster: its counters lie on several slots of one node
	vals     []any     // its part of the reply
	err      error
	done     chan struct{}
	// state says who owns the call once it is queued (callQueued): the
	// worker that takes it for a batch (callTaken) or its caller, who gave
	// up waiting (callAbandoned). Whoever wins the swap from callQueued
	// decides; a worker recycles an abandoned call.
	state atomic.Uint32
	timer *time.Timer // the caller's, to stop waiting at deadline; reused
	// Set by the worker for a traced store's span (see takeTrace): when
	// the call was sent, how many requests it carried, how long it took.
	sent      time.Time
	size      int
	roundTrip time.Duration
}

// The states of a pending (pending.state).
const (
	callQueued uint32 = iota
	callTaken
	callAbandoned
)

// take queues one Take that must end by deadline, all of whose counters
// lie on slot on a cluster (or, when multi, on several slots of one node,
// slot its first counter's), and waits for its part of a batch's reply. The
// wait is bounded: first by the call in flight, whose deadline came before
// this Take's (see send), then by this Take's batch, whose deadline is the
// earliest of its Takes'. It fills info, when not nil, with the batch the
// Take went in.
func (b *batcher) take(ctx context.Context, deadline time.Time, nowMs int64, reqs []window.Counter, res []window.Result, info *takeTrace, slot uint16, multi bool) (bool, error) {
	var queued time.Time
	if info != nil {
		queued = time.Now()
	}
	r := newTake(nowMs, reqs, nil)
	c, err := b.enqueue(ctx, deadline, r, slot, multi)
	if err != nil {
		return false, err
	}
	vals, err := b.wait(c, info, queued)
	if err != nil {
		return false, err
	}
	return parseRequest(vals, &r, res)
}

// enqueue hands r, on slot (see take), to the workers, for wait to collect.
// When the queue is full it waits for room until ctx ends or deadline
// passes, and then fails with nothing sent.
func (b *batcher) enqueue(ctx context.Context, deadline time.Time, r take, slot uint16, multi bool) (*pending, error) {
	c := b.calls.Get().(*pending)
	c.ctx, c.deadline, c.take, c.slot, c.multi, c.vals, c.err = ctx, deadline, r, slot, multi, nil, nil
	c.state.Store(callQueued)
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		b.calls.Put(c)
		return nil, fmt.Errorf("%w: %w", window.ErrStore, ErrBatcherClosed)
	}
	select {
	case b.queue <- c:
		return c, nil
	default:
	}
	// Full: every worker is busy and MaxBatch requests per worker wait.
	c.timer.Reset(time.Until(deadline))
	var err error
	select {
	case b.queue <- c:
		c.timer.Stop()
		return c, nil
	case <-c.timer.C:
		err = context.DeadlineExceeded
	case <-ctx.Done():
		err = ctx.Err()
	}
	// Stopped before c goes back to the pool: a deferred Stop would run
	// after the Put and could stop the timer of the Take that got c next.
	c.timer.Stop()
	b.calls.Put(c)
	return nil, fmt.Errorf("%w: not sent: queue full: %w", window.ErrStore, err)
}

// wait waits for c's part of its batch's reply and returns it, or the
// error of its call; c goes back to the pool. If c's deadline passes or its
// ctx ends while c is still queued, wait gives c up (a worker recycles it)
// and fails with nothing sent; once a worker has taken c, its batch call is
// bounded by c's deadline (see send), so wait waits for it. It fills info,
// when not nil, with the batch c went in, queued at queued.
func (b *batcher) wait(c *pending, info *takeTrace, queued time.Time) ([]any, error) {
	select {
	case <-c.done:
	default:
		c.timer.Reset(time.Until(c.deadline))
		var err error
		select {
		case <-c.done:
		case <-c.timer.C:
			err = context.DeadlineExceeded
		case <-c.ctx.Done():
			err = c.ctx.Err()
		}
		c.timer.Stop()
		if err != nil {
			if c.state.CompareAndSwap(callQueued, callAbandoned) {
				// The worker owns c now; the caller's requests are not read.
				return nil, fmt.Errorf("%w: not sent: %w", window.ErrStore, err)
			}
			<-c.done // taken: its call ends by c's deadline
		}
	}
	if info != nil && c.size > 0 {
		info.batch, info.queued, info.roundTrip = c.size, c.sent.Sub(queued), c.roundTrip
	}
	vals, err := c.vals, c.err
	b.recycle(c)
	return vals, err
}

// recycle puts c back in the pool, without references to its last Take.
func (b *batcher) recycle(c *pending) {
	c.ctx, c.take, c.vals, c.err = nil, take{}, nil, nil
	c.size = 0
	b.calls.Put(c)
}

// claim gives a worker c, taken from the queue: it reports false, and
// recycles c, if c's caller gave up waiting.
func (b *batcher) claim(c *pending) bool {
	if c.state.CompareAndSwap(callQueued, callTaken) {
		return true
	}
	b.recycle(c)
	return false
}

func (b *batcher) close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	close(b.stop)
	b.wg.Wait()
	for {
		select {
		case c := <-b.queue:
			if b.claim(c) {
				c.err = fmt.Errorf("%w: %w", window.ErrStore, ErrBatcherClosed)
				c.done <- struct{}{}
			}
		default:
			return nil
		}
	}
}

// sendBuf is a worker's memory for building its script calls, reused from
// one batch to the next.
type sendBuf struct {
	live  []*pending
	parts []take
	call  callBuf
	slots clusterCalls // on a cluster
}

func (b *batcher) work() {
	defer b.wg.Done()
	batch := make([]*pending, 0, b.opts.MaxBatch)
	buf := &sendBuf{live: make([]*pending, 0, b.opts.MaxBatch)}
	// For Spacing and Linger: one timer, reset for each wait (since Go
	// 1.23 a Reset timer delivers no stale tick).
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	after := func(d time.Duration) <-chan time.Time {
		timer.Reset(d)
		return timer.C
	}
	last := 0 // requests in the previous batch
	for {
		select {
		case <-b.gather:
		case <-b.stop:
			return
		}
		var ok bool
		batch, ok = b.next(batch, last, after)
		if ok {
			b.inFlight.Add(1)
			b.lastSent = time.Now()
		}
		b.gather <- struct{}{}
		if !ok {
			return
		}
		last = len(batch)
		b.send(batch, buf)
		if b.inFlight.Add(-1) == 0 {
			select {
			case b.returned <- struct{}{}:
			default: // a wake is pending already
			}
		}
	}
}

// next returns the next batch, in batch[:0]: the first request to come and
// those waiting behind it (up to MaxBatch) when it may leave (see depart),
// and with Linger those that come while it lingers. It lingers only when
// the first request was waiting already and the previous batch held last >
// 1 requests: a worker that had to wait is idle, whatever its previous
// batch. ok is false once the batcher is closed. Only the worker holding
// the gather token calls it.
func (b *batcher) next(batch []*pending, last int, after func(time.Duration) <-chan time.Time) (_ []*pending, ok bool) {
	batch, busy := batch[:0], true
	select {
	case c := <-b.queue:
		batch = append(batch, c)
	default:
		busy = false
		select {
		case c := <-b.queue:
			batch = append(batch, c)
		case <-b.stop:
			return batch, false
		}
	}
	if !b.depart(after) {
		return batch, false
	}
	batch = b.fill(batch)
	if busy && b.opts.Linger > 0 && last > 1 && len(batch) < b.opts.MaxBatch {
		batch = b.linger(batch, after, b.lingerFor(batch, time.Now()))
	}
	return batch, true
}

// depart waits until a batch may leave: when no call is in flight, or when
// the last one sent has been out for Spacing. Waiting for the call in
// flight to come back gathers the most requests in one call, but a request
// that arrived just after it left then waits two round trips; so that
// waiting never costs more than Spacing, another call leaves beside it
// after that long. The calls in flight then number about the round trip
// over Spacing: the round trip is measured by waiting, not configured. A
// call that returns while others are in flight does not end the wait: the
// spacing does. It is false once the batcher is closed.
func (b *batcher) depart(after func(time.Duration) <-chan time.Time) bool {
	for b.inFlight.Load() > 0 {
		wait := b.opts.Spacing - time.Since(b.lastSent)
		if wait <= 0 {
			return true
		}
		select {
		case <-b.returned: // check again: stale wakes are harmless
		case <-after(wait):
			return true
		case <-b.stop:
			return false
		}
	}
	return true
}

// fill adds the requests already waiting to batch, up to MaxBatch.
func (b *batcher) fill(batch []*pending) []*pending {
	for len(batch) < b.opts.MaxBatch {
		select {
		case c := <-b.queue:
			batch = append(batch, c)
		default:
			return batch
		}
	}
	return batch
}

// lingerFor is how long a batch may wait for company at now: Linger, or
// half the time left to its earliest deadline if that is sooner; not more
// than zero when a deadline has passed.
func (b *batcher) lingerFor(batch []*pending, now time.Time) time.Duration {
	wait := b.opts.Linger
	for _, c := range batch {
		wait = min(wait, c.deadline.Sub(now)/2)
	}
	return wait
}

// linger sleeps for wait (from lingerFor), on the channel after returns, or
// until Close, and then fills the batch. It sleeps rather than waking for
// each request that arrives: a wake per request costs the calling process
// more CPU than the larger batch saves.
func (b *batcher) linger(batch []*pending, after func(time.Duration) <-chan time.Time, wait time.Duration) []*pending {
	if wait <= 0 {
		return batch
	}
	select {
	case <-after(wait):
	case <-b.stop:
	}
	return b.fill(batch)
}

// send runs the script call of the batch's requests whose contexts are
// still live (on a cluster, one per node; see pipeline.go), hands each its
// part of the reply and tells every request of batch, live or not, that it
// is done, exactly once (see finish).
func (b *batcher) send(batch []*pending, buf *sendBuf) {
	var deadline time.Time
	live := buf.live[:0]
	defer func() { buf.live = live }()
	now := time.Now()
	for _, c := range batch {
		if !b.claim(c) {
			continue
		}
		err := c.ctx.Err()
		if err == nil && !now.Before(c.deadline) {
			err = context.DeadlineExceeded
		}
		if err != nil {
			c.err = fmt.Errorf("%w: not sent: %w", window.ErrStore, err) // nothing counted
			c.done <- struct{}{}
			continue
		}
		// The earliest deadline bounds the call: a Take must not wait past
		// its own because others in the batch may wait longer. That can cut
		// the call short for the others: a Take that queued long, or whose
		// caller had little time left, shares its deadline with the batch.
		if deadline.IsZero() || c.deadline.Before(deadline) {
			deadline = c.deadline
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var sent time.Time
	if b.s.tracer != nil {
		sent = time.Now()
	}
	if b.s.shards != nil {
		b.sendSlots(ctx, live, buf, sent)
		return
	}
	args := buf.call.build(buf.requests(live))
	v, err := b.s.script(ctx, args)
	buf.call.release() // let go of the keys
	clear(buf.parts)   // and of the requests
	deliver(live, v, err)
	b.finish(live, len(live), sent)
}

// finish tells calls, of a batch of size requests sent at sent, that their
// answers are in; a traced store's calls first learn their batch's size and
// round trip (see takeTrace). A call may go back to the pool and into
// another batch as soon as it is told.
func (b *batcher) finish(calls []*pending, size int, sent time.Time) {
	if b.s.tracer != nil {
		rt := time.Since(sent)
		for _, c := range calls {
			c.sent, c.size, c.roundTrip = sent, size, rt
		}
	}
	for _, c := range calls {
		c.done <- struct{}{}
	}
}

// requests returns the requests of calls in buf.parts.
func (buf *sendBuf) requests(calls []*pending) []take {
	parts := buf.parts[:0]
	for _, c := range calls {
		parts = append(parts, c.take)
	}
	buf.parts = parts
	return parts
}

// deliver hands each of calls its part of v, the reply of the script call
// they shared, or the call's error.
func deliver(calls []*pending, v any, err error) {
	var vals []any
	if err == nil {
		vals, err = replyValues(v)
	}
	for _, c := range calls {
		if err != nil {
			c.err = fmt.Errorf("%w: take (batch of %d): %w", window.ErrStore, len(calls), err)
			continue
		}
		part, rest, cerr := cutReply(vals, c.short, c.len())
		if cerr != nil {
			c.err = cerr
			continue
		}
		c.vals, vals = part, rest
	}
}
