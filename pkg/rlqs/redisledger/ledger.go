package redisledger

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
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

// Ledger is an rlqs.Ledger in Redis, shared by every replica that uses the
// same Redis and Prefix. It is safe for concurrent use; it does not own
// the client. Its errors wrap window.ErrStore.
type Ledger struct {
	c          client
	prefix     string
	policy     rlqs.Policy
	tries      int
	roundTrips atomic.Uint64
}

// New returns a Ledger over c.
func New(c client, o Options) *Ledger {
	if o.Prefix == "" {
		o.Prefix = "rlqs:"
	}
	if o.Tries <= 0 {
		o.Tries = 5
	}
	return &Ledger{c: c, prefix: o.Prefix, policy: o.Policy, tries: o.Tries}
}

// RoundTrips returns how many round trips the ledger has made to Redis.
func (l *Ledger) RoundTrips() uint64 { return l.roundTrips.Load() }

// Assign implements rlqs.Ledger: it reads the bucket, divides in Go, and
// writes the client's new state if no other replica wrote the bucket
// meanwhile, else divides again on the state that replica wrote.
func (l *Ledger) Assign(ctx context.Context, now time.Time, key string, f rlqs.Fleet, r rlqs.Report, ttl time.Duration) (rlqs.Share, error) {
	hkey := l.prefix + key
	m, err := l.c.HGetAll(ctx, hkey).Result()
	l.roundTrips.Add(1)
	if err != nil {
		return rlqs.Share{}, fmt.Errorf("%w: rlqs bucket %q: %w", window.ErrStore, key, err)
	}
	snap, err := snapshotOf(m)
	if err != nil {
		return rlqs.Share{}, fmt.Errorf("%w: rlqs bucket %q: %w", window.ErrStore, key, err)
	}
	field := clientPrefix + r.Client
	var buf []byte
	for range l.tries {
		prev, known := snap.clients[r.Client]
		delete(snap.clients, r.Client)
		share, cur, expired := l.policy.Divide(now, f, snap.clients, prev, known, r, ttl)
		last := cur.Expires
		args := make([]any, 4, 4+len(expired))
		for id, c := range snap.clients {
			if c.Expires.After(last) && !isIn(expired, id) {
				last = c.Expires
			}
		}
		buf = appendState(buf[:0], cur)
		args[0], args[1], args[2], args[3] = snap.version, max(last.Sub(now).Milliseconds()+1, 1), field, string(buf)
		for _, id := range expired {
			args = append(args, clientPrefix+id)
		}
		v, err := l.commit(ctx, hkey, args)
		if err != nil {
			return rlqs.Share{}, fmt.Errorf("%w: rlqs bucket %q: %w", window.ErrStore, key, err)
		}
		if n, ok := v.(int64); ok && n == 1 {
			return share, nil
		}
		reply, ok := v.([]any)
		if !ok {
			return rlqs.Share{}, fmt.Errorf("%w: rlqs bucket %q: commit answered %T", window.ErrStore, key, v)
		}
		if snap, err = parseSnapshot(reply); err != nil {
			return rlqs.Share{}, fmt.Errorf("%w: rlqs bucket %q: %w", window.ErrStore, key, err)
		}
	}
	return rlqs.Share{}, fmt.Errorf("%w: rlqs bucket %q: %w", window.ErrStore, key, errContention)
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

func isIn(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// snapshotOf reads a bucket's hash as HGETALL returned it.
func snapshotOf(m map[string]string) (snapshot, error) {
	reply := make([]any, 0, 2*len(m))
	for f, v := range m {
		reply = append(reply, f, v)
	}
	return parseSnapshot(reply)
}
