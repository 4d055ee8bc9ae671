package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Promotable asks the sentinels how many replicas of a master a failover
// could promote now: those they list for it that are neither down (s_down,
// o_down) nor disconnected. A write that fewer replicas acknowledged than
// Options.WaitReplicas asks is at risk only if one of those lacks it; with
// none (the replica died, or the master is the replica promoted after its
// old master died) no failover can drop it, and a Store with
// Options.Promotable counts it confirmed instead of failing every call
// until a replica comes back. Answers are kept for Every, so a run of
// unconfirmed calls asks the sentinels once per Every. It is safe for
// concurrent use.
type Promotable struct {
	sentinels []*redis.SentinelClient
	master    string
	every     time.Duration

	mu  sync.Mutex
	at  time.Time // of the last answer
	n   int
	err error
}

// NewPromotable returns a Promotable for master through the sentinels with
// the options opts (one per sentinel, tried in order), keeping each answer
// for every (default 250 ms). Close closes its clients.
func NewPromotable(opts []*redis.Options, master string, every time.Duration) *Promotable {
	if every <= 0 {
		every = 250 * time.Millisecond
	}
	p := &Promotable{master: master, every: every}
	for _, o := range opts {
		p.sentinels = append(p.sentinels, redis.NewSentinelClient(o))
	}
	return p
}

// Count returns how many replicas of the master a failover could promote
// (see Promotable), asking the sentinels in turn until one answers, or the
// last answer when it is younger than every.
func (p *Promotable) Count(ctx context.Context) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.at.IsZero() && time.Since(p.at) < p.every {
		return p.n, p.err
	}
	p.n, p.err = p.ask(ctx)
	p.at = time.Now()
	return p.n, p.err
}

// ask asks the sentinels in turn; see Count.
func (p *Promotable) ask(ctx context.Context) (int, error) {
	var errs []error
	for _, s := range p.sentinels {
		replicas, err := s.Replicas(ctx, p.master).Result()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		n := 0
		for _, r := range replicas {
			if !strings.Contains(r["flags"], "s_down") && !strings.Contains(r["flags"], "o_down") && !strings.Contains(r["flags"], "disconnected") {
				n++
			}
		}
		return n, nil
	}
	return 0, fmt.Errorf("redisstore: replicas of %s from the sentinels: %w", p.master, errors.Join(errs...))
}

// Close closes the sentinel clients.
func (p *Promotable) Close() error {
	var errs []error
	for _, s := range p.sentinels {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}
