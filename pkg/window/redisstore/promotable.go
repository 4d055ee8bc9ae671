package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReplicaCount tells a Store with Options.WaitReplicas how many replicas of
// its master a failover could promote now (a *Promotable asks the
// sentinels). Its methods are called on the counting path and must not
// block.
type ReplicaCount interface {
	// Count returns the last count when it is recent (ok), and asks for a
	// new one in the background when it is getting old.
	Count() (n int, ok bool)
	// None reports whether the last count is recent and 0, and then keeps
	// it fresh in the background; otherwise it asks for nothing.
	None() bool
}

// Promotable counts, from the sentinels, the replicas of a master that a
// failover could promote: those they list for it that are neither down
// (s_down, o_down) nor disconnected. A write that fewer replicas
// acknowledged than Options.WaitReplicas asks is at risk only if one of
// those lacks it; with none (the replica died, or the master is the replica
// promoted after its old master died) no failover can drop it. A Store with
// it as Options.Promotable then counts such writes as confirmed, and sends
// no WAIT while the count stays 0, instead of failing every call until a
// replica comes back.
//
// One goroutine, stopped by Close, asks the sentinels when a count is
// wanted and the last is older than Every, and, while the last count is 0,
// every Every on its own: a master without replicas may see a call only
// once a second (a circuit breaker's probe), and must find a recent count
// then. A count is recent for twice Every. It is safe for concurrent use.
type Promotable struct {
	sentinels []*redis.SentinelClient
	master    string
	every     time.Duration
	want      chan struct{} // a new count is wanted
	stop      chan struct{}
	done      chan struct{}

	// last is the last answer, nil before the first; read without a lock,
	// since Count and None run on every script call.
	last atomic.Pointer[answer]
}

// answer is one answer of the sentinels, kept for Count and None.
type answer struct {
	at  time.Time
	n   int
	err error
}

// state returns the last count, its age, and whether there is one (an
// answer without error).
func (p *Promotable) state() (n int, age time.Duration, ok bool) {
	a := p.last.Load()
	if a == nil || a.err != nil {
		return 0, 0, false
	}
	return a.n, time.Since(a.at), true
}

// NewPromotable returns a Promotable for master through the sentinels with
// the options opts (one per sentinel, tried in order), asking at most once
// per every (default 250 ms). Close stops it and closes its clients.
func NewPromotable(opts []*redis.Options, master string, every time.Duration) *Promotable {
	if every <= 0 {
		every = 250 * time.Millisecond
	}
	p := &Promotable{master: master, every: every, want: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	for _, o := range opts {
		p.sentinels = append(p.sentinels, redis.NewSentinelClient(o))
	}
	go p.run()
	return p
}

// run asks the sentinels whenever a count is wanted, and every p.every
// while the last count is 0, until Close.
func (p *Promotable) run() {
	defer close(p.done)
	poll := time.NewTimer(p.every)
	poll.Stop()
	defer poll.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-p.want:
		case <-poll.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 4*p.every)
		n, err := p.query(ctx)
		cancel()
		p.keep(n, err)
		if err == nil && n == 0 {
			poll.Reset(p.every)
		} else {
			poll.Stop()
		}
	}
}

// Count implements ReplicaCount.
func (p *Promotable) Count() (int, bool) {
	n, age, ok := p.state()
	if !ok || age >= p.every {
		p.ask()
	}
	return n, ok && age < 2*p.every
}

// None implements ReplicaCount.
func (p *Promotable) None() bool {
	n, age, ok := p.state()
	if !ok || n != 0 || age >= 2*p.every {
		return false
	}
	if age >= p.every {
		p.ask()
	}
	return true
}

// ask wants a new count, without waiting for it.
func (p *Promotable) ask() {
	select {
	case p.want <- struct{}{}:
	default: // already wanted
	}
}

// Ask asks the sentinels in turn until one answers, keeps the answer for
// Count and None, and returns it. A count of 0 starts the polling.
func (p *Promotable) Ask(ctx context.Context) (int, error) {
	n, err := p.query(ctx)
	p.keep(n, err)
	if err == nil && n == 0 {
		p.ask()
	}
	return n, err
}

// keep keeps an answer for Count and None.
func (p *Promotable) keep(n int, err error) {
	p.last.Store(&answer{at: time.Now(), n: n, err: err})
}

// query asks the sentinels in turn; see Ask.
func (p *Promotable) query(ctx context.Context) (int, error) {
	var errs []error
	for _, s := range p.sentinels {
		replicas, err := s.Replicas(ctx, p.master).Result()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		n := 0
		for _, r := range replicas {
			if f := r["flags"]; !strings.Contains(f, "s_down") && !strings.Contains(f, "o_down") && !strings.Contains(f, "disconnected") {
				n++
			}
		}
		return n, nil
	}
	return 0, fmt.Errorf("redisstore: replicas of %s from the sentinels: %w", p.master, errors.Join(errs...))
}

// Close stops the goroutine and closes the sentinel clients.
func (p *Promotable) Close() error {
	close(p.stop)
	<-p.done
	var errs []error
	for _, s := range p.sentinels {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}
