package redisledger

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

//go:embed commit.lua
var commitSource string

var commitHash = redis.NewScript(commitSource).Hash()

// client is the part of a go-redis client a Ledger uses; a
// redis.UniversalClient (*redis.Client, a Sentinel failover client, a
// *redis.ClusterClient) has it. Both calls name the bucket's one key, so a
// cluster client sends them to the key's master.
type client interface {
	HGetAll(ctx context.Context, key string) *redis.MapStringStringCmd
	EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd
	Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd
}

// Options configure a Ledger. Zero fields take their defaults.
type Options struct {
	// Prefix starts every bucket's key; default "rlqs:". A key holding a
	// hash tag ({...}) keeps it, so a bucket named after its rule's
	// counter key lands in the counter's slot.
	Prefix string
	// Policy divides each bucket (see rlqs.Policy).
	Policy rlqs.Policy
	// Tries bounds the compare-and-set attempts of one Assign when other
	// replicas write the same bucket meanwhile; default 5. Reports of one
	// bucket arrive a few per second at most, so a conflict is rare and a
	// run of them means Redis is overloaded: Assign then fails.
	Tries int
}

// errContention is the failure of an Assign that lost every attempt.
var errContention = errors.New("redisledger: bucket written by others on every attempt")

const (
	// sweepEvery is how many Assigns pass between sweeps of the cache.
	sweepEvery = 4096
	// maxCached bounds the buckets whose state a Ledger keeps; past it the
	// cache starts over (each bucket is read again on its next Assign).
	maxCached = 1 << 16
)

// Ledger is an rlqs.Ledger in Redis, shared by every replica that uses the
// same Redis and Prefix. It is safe for concurrent use; it does not own the
// client. Its errors wrap window.ErrStore.
//
// It keeps each bucket's state as of its last write or read, and divides on
// that: when no other replica wrote the bucket meanwhile, an Assign is one
// round trip (the version-checked write); when one did, the write answers
// the current state and the Assign divides again on it. Assigns of one
// bucket in one process take turns, so they do not make each other retry.
type Ledger struct {
	c          client
	prefix     string
	policy     rlqs.Policy
	tries      int
	roundTrips atomic.Uint64

	mu      sync.Mutex
	buckets map[string]*bucket
	calls   int
}

// bucket is the last state of one bucket this Ledger saw.
type bucket struct {
	mu   sync.Mutex
	snap *snapshot // nil: not known, read it
}

// New returns a Ledger over c.
func New(c client, o Options) *Ledger {
	if o.Prefix == "" {
		o.Prefix = "rlqs:"
	}
	if o.Tries <= 0 {
		o.Tries = 5
	}
	return &Ledger{c: c, prefix: o.Prefix, policy: o.Policy, tries: o.Tries, buckets: make(map[string]*bucket)}
}

// RoundTrips returns how many round trips the ledger has made to Redis.
func (l *Ledger) RoundTrips() uint64 { return l.roundTrips.Load() }

// Assign implements rlqs.Ledger: it divides in Go on the bucket's state and
// writes the client's new state if the bucket is still at that state's
// version, else divides again on the state Redis answers.
func (l *Ledger) Assign(ctx context.Context, now time.Time, key string, f rlqs.Fleet, r rlqs.Report, ttl time.Duration) (rlqs.Share, error) {
	hkey := l.prefix + key
	b := l.bucket(hkey, now)
	b.mu.Lock()
	defer b.mu.Unlock()
	share, err := l.assign(ctx, b, now, hkey, f, r, ttl)
	if err != nil {
		b.snap = nil // the write may or may not have happened
		return rlqs.Share{}, fmt.Errorf("%w: rlqs bucket %q: %w", window.ErrStore, key, err)
	}
	return share, nil
}

func (l *Ledger) assign(ctx context.Context, b *bucket, now time.Time, hkey string, f rlqs.Fleet, r rlqs.Report, ttl time.Duration) (rlqs.Share, error) {
	if b.snap == nil {
		m, err := l.c.HGetAll(ctx, hkey).Result()
		l.roundTrips.Add(1)
		if err != nil {
			return rlqs.Share{}, err
		}
		snap, err := snapshotOf(m)
		if err != nil {
			return rlqs.Share{}, err
		}
		b.snap = &snap
	}
	field := clientPrefix + r.Client
	for range l.tries {
		snap := b.snap
		prev, known := snap.clients[r.Client]
		delete(snap.clients, r.Client)
		share, cur, expired := l.policy.Divide(now, f, snap.clients, prev, known, r, ttl)
		for _, id := range expired {
			delete(snap.clients, id)
		}
		last := cur.Expires
		for _, c := range snap.clients {
			last = maxTime(last, c.Expires)
		}
		next := strconv.FormatUint(rand.Uint64(), 36)
		args := make([]any, 5, 5+len(expired))
		args[0], args[1], args[2], args[3] = snap.version, next, max(last.Sub(now).Milliseconds()+1, 1), field
		args[4] = string(appendState(nil, cur))
		for _, id := range expired {
			args = append(args, clientPrefix+id)
		}
		v, err := l.commit(ctx, hkey, args)
		if err != nil {
			return rlqs.Share{}, err
		}
		if n, ok := v.(int64); ok && n == 1 {
			snap.clients[r.Client] = cur
			snap.version = next
			return share, nil
		}
		reply, ok := v.([]any)
		if !ok {
			return rlqs.Share{}, fmt.Errorf("commit answered %T", v)
		}
		fresh, err := parseSnapshot(reply)
		if err != nil {
			return rlqs.Share{}, err
		}
		b.snap = &fresh
	}
	return rlqs.Share{}, errContention
}

// bucket returns the cache entry of hkey, sweeping the cache now and then:
// a bucket whose clients have all expired is dropped.
func (l *Ledger) bucket(hkey string, now time.Time) *bucket {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if l.calls%sweepEvery == 0 || len(l.buckets) >= maxCached {
		l.sweep(now)
	}
	b := l.buckets[hkey]
	if b == nil {
		b = &bucket{}
		l.buckets[hkey] = b
	}
	return b
}

// sweep drops the cache entries of buckets with no unexpired client, and
// everything when the cache is still full. An entry in use is kept.
func (l *Ledger) sweep(now time.Time) {
	for k, b := range l.buckets {
		if !b.mu.TryLock() {
			continue
		}
		if b.snap == nil || !anyLive(b.snap.clients, now) {
			delete(l.buckets, k)
		}
		b.mu.Unlock()
	}
	if len(l.buckets) >= maxCached {
		l.buckets = make(map[string]*bucket)
	}
}

func anyLive(clients map[string]rlqs.ClientState, now time.Time) bool {
	for _, c := range clients {
		if c.Expires.After(now) {
			return true
		}
	}
	return false
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// commit runs commit.lua, as EVAL when Redis has lost the script.
func (l *Ledger) commit(ctx context.Context, key string, args []any) (any, error) {
	keys := []string{key}
	v, err := l.c.EvalSha(ctx, commitHash, keys, args...).Result()
	l.roundTrips.Add(1)
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		v, err = l.c.Eval(ctx, commitSource, keys, args...).Result()
		l.roundTrips.Add(1)
	}
	return v, err
}

// snapshotOf reads a bucket's hash as HGETALL returned it.
func snapshotOf(m map[string]string) (snapshot, error) {
	reply := make([]any, 0, 2*len(m))
	for f, v := range m {
		reply = append(reply, f, v)
	}
	return parseSnapshot(reply)
}
