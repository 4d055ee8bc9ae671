package redisledger

import (
	"context"
	_ "embed"
	"fmt"
	"math/rand/v2"
	"slices"
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
// *redis.ClusterClient) has it. Every command names one bucket's one key,
// so a cluster client's pipeline sends each to its key's master.
type client interface {
	Pipeline() redis.Pipeliner
}

// Options configure a Ledger. Zero fields take their defaults.
type Options struct {
	// Prefix starts every bucket's key; default "rlqs:". A key holding a
	// hash tag ({...}) keeps it, so a bucket named after its rule's
	// counter key lands in the counter's slot.
	Prefix string
	// Policy divides each bucket (see rlqs.Policy).
	Policy rlqs.Policy
	// Tries bounds the writes of one Assign; default 2. A write that
	// finds the bucket at another version than the one divided on answers
	// the current hash (O(clients)), and the Ledger divides again on it,
	// except the last, and except when the Ledger's copy of the bucket is
	// younger than Refresh: that write is capped in Redis (O(1) but for a
	// scan now and then). So contention never fails an Assign. 1 caps
	// every write that finds another version, and the copy then learns
	// nothing of other replicas' clients.
	Tries int
	// Refresh is how old, on the clock Assign is given, the copy of a
	// bucket must be for a write that finds another version to read the
	// hash and divide again rather than be capped; default 1 s. A capped
	// write is cheap (O(1)) but divided on the copy, which knows other
	// replicas' clients only as of its last read: the refresh bounds how
	// stale the division's picture of the fleet is.
	Refresh time.Duration
}

const (
	// sweepEvery is how many Assigns pass between sweeps of the cache.
	sweepEvery = 4096
	// maxCached bounds the buckets whose state a Ledger keeps; past it the
	// cache starts over (each bucket is read again on its next Assign).
	maxCached = 1 << 16
	// defaultGrace is rlqs.Policy's default Grace.
	defaultGrace = time.Second
	// scanGap is the least time, on the clock Assign is given, between
	// two scans of one bucket's clients by the commit script (O(clients)
	// in Redis); between them a capped raise gets what the bucket's bound
	// leaves. Half the default Grace: room a decrease frees is counted
	// within a second.
	scanGap = 500 * time.Millisecond
	// defaultRefresh is Options.Refresh's default.
	defaultRefresh = time.Second
	// defaultTries is Options.Tries's default.
	defaultTries = 2
	// maxScriptValue bounds the rate and burst the commit script caps
	// with: Lua's numbers are doubles, exact up to 2^53. A fleet above it
	// (about 5.2·10^7 tokens/s in rlqs.PerSecond units) is capped at it when the script recomputes.
	maxScriptValue = 1 << 52
	// minBurst is the least burst of a share with a rate in the division
	// (rlqs.Policy.Divide's floor); the script keeps it when it caps.
	minBurst = 2
	// staleVersion marks a cache that may differ from Redis: it never
	// matches a version (those are base 36), so the next write is capped
	// in Redis.
	staleVersion = "-"
)

// Ledger is an rlqs.Ledger in Redis, shared by every replica that uses the
// same Redis and Prefix. It is safe for concurrent use; it does not own the
// client. Its errors wrap window.ErrStore.
//
// It keeps each bucket's state as of its last write or read, and divides on
// that: when no other replica wrote the bucket meanwhile, the division saw
// the current state and is written as is, in one round trip; when one did,
// the write answers the current state and the Ledger divides again on it,
// up to Options.Tries writes, the last of which the commit script caps by
// what the bucket's other clients count in Redis. So the invariant of the
// division holds across replicas however many write at once, and no Assign
// fails for contention. Assigns of one bucket in one process take turns.
type Ledger struct {
	c          client
	prefix     string
	policy     rlqs.Policy
	tries      int
	refresh    time.Duration
	roundTrips atomic.Uint64
	capCount   atomic.Uint64

	mu      sync.Mutex
	buckets map[string]*bucket
	calls   int
}

// bucket is the last state of one bucket this Ledger saw.
type bucket struct {
	mu   sync.Mutex
	snap *snapshot // nil: not known, read it
	read time.Time // when snap last equalled the hash
}

// New returns a Ledger over c.
func New(c client, o Options) *Ledger {
	if o.Prefix == "" {
		o.Prefix = "rlqs:"
	}
	if o.Tries <= 0 {
		o.Tries = defaultTries
	}
	if o.Refresh <= 0 {
		o.Refresh = defaultRefresh
	}
	return &Ledger{c: c, prefix: o.Prefix, policy: o.Policy, tries: o.Tries, refresh: o.Refresh, buckets: make(map[string]*bucket)}
}

// grace is rlqs.Policy's Grace with its default (1 s), which the commit
// script needs for a decrease it makes itself.
func (l *Ledger) grace() time.Duration {
	if l.policy.Grace <= 0 {
		return defaultGrace
	}
	return l.policy.Grace
}

// RoundTrips returns how many round trips the ledger has made to Redis.
func (l *Ledger) RoundTrips() uint64 { return l.roundTrips.Load() }

// Recomputed returns how many writes the commit script capped on Redis's
// state because another replica had written the bucket since this one
// divided.
func (l *Ledger) Recomputed() uint64 { return l.capCount.Load() }

// item is one request of an Assign being served.
type item struct {
	q    *rlqs.Request
	out  *rlqs.Result
	hkey string
	b    *bucket
	// The write of the current try.
	share  rlqs.Share
	cur    rlqs.ClientState
	next   string // the version it sets
	reread bool   // on another version, answer the hash instead of capping
	args   []any
	cmd    *redis.Cmd
}

// Assign implements rlqs.Ledger: it divides in Go on each bucket's cached
// state and writes each client's new state with the commit script, which
// caps the grant on the bucket's current state when the cache is stale.
// The requests share their round trips: one pipeline reads the buckets
// not cached, one writes them all, and one more per further try writes
// those whose bucket another replica wrote meanwhile. So a report of any
// number of buckets whose copies are current costs one round trip. Two
// requests of one key are served one after the other.
func (l *Ledger) Assign(ctx context.Context, now time.Time, reqs []rlqs.Request) []rlqs.Result {
	out := make([]rlqs.Result, len(reqs))
	items := make([]item, len(reqs))
	order := make([]*item, len(reqs))
	for i := range reqs {
		items[i] = item{q: &reqs[i], out: &out[i], hkey: l.prefix + reqs[i].Key}
		order[i] = &items[i]
	}
	// Sorted by key, so every Assign locks its buckets in one order and
	// two never wait for each other's; stable, so a key's requests keep
	// their order.
	slices.SortStableFunc(order, func(a, b *item) int { return strings.Compare(a.hkey, b.hkey) })
	for len(order) > 0 {
		// A wave holds each key's first request left.
		wave, rest := order[:0:0], order[:0]
		for i, it := range order {
			if i > 0 && it.hkey == order[i-1].hkey {
				rest = append(rest, it)
			} else {
				wave = append(wave, it)
			}
		}
		l.assignWave(ctx, now, wave)
		order = rest
	}
	return out
}

// assignWave serves items of distinct keys, sorted by key.
func (l *Ledger) assignWave(ctx context.Context, now time.Time, wave []*item) {
	l.bucketsOf(wave, now)
	for _, it := range wave {
		it.b.mu.Lock()
	}
	defer func() {
		for _, it := range wave {
			it.b.mu.Unlock()
		}
	}()
	l.read(ctx, now, wave)
	// A write that finds another version answers the hash, and the Ledger
	// divides again on it, but the last, or one from a copy younger than
	// the refresh, which is capped in Redis: an Assign never fails for
	// contention.
	live := wave
	for try := 1; len(live) > 0; try++ {
		todo := live[:0:0]
		for _, it := range live {
			if it.b.snap != nil && it.out.Err == nil && l.divide(now, it, try) {
				todo = append(todo, it)
			}
		}
		if len(todo) == 0 {
			return
		}
		l.commit(ctx, todo)
		live = todo[:0]
		for _, it := range todo {
			if again, err := l.written(it); err != nil {
				l.fail(it, err)
			} else if again {
				it.b.read = now
				live = append(live, it)
			}
		}
	}
}

// read fetches, in one pipeline, the hashes of the items whose bucket is
// not cached.
func (l *Ledger) read(ctx context.Context, now time.Time, wave []*item) {
	var reads []*item
	for _, it := range wave {
		if it.b.snap == nil {
			reads = append(reads, it)
		}
	}
	if len(reads) == 0 {
		return
	}
	p := l.c.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(reads))
	for i, it := range reads {
		cmds[i] = p.HGetAll(ctx, it.hkey)
	}
	_, _ = p.Exec(ctx) // each command holds its own error
	l.roundTrips.Add(1)
	for i, it := range reads {
		m, err := cmds[i].Result()
		if err != nil {
			l.fail(it, err)
			continue
		}
		snap, err := snapshotOf(m)
		if err != nil {
			l.fail(it, err)
			continue
		}
		it.b.snap, it.b.read = &snap, now
	}
}

// fail records err as it's result; the bucket is forgotten, since a write
// that failed may or may not have happened.
func (l *Ledger) fail(it *item, err error) {
	it.b.snap = nil
	it.out.Err = fmt.Errorf("%w: rlqs bucket %q: %w", window.ErrStore, it.q.Key, err)
}

// divide computes it's write for this try on its bucket's copy, and
// reports whether there is one: a Quiet request whose share is unchanged
// is answered from the copy and writes nothing.
func (l *Ledger) divide(now time.Time, it *item, try int) bool {
	q, snap := it.q, it.b.snap
	it.reread = try < l.tries && now.Sub(it.b.read) >= l.refresh
	self, prev := snap.clients.Lookup(q.Report.Client)
	share, cur, expired := l.policy.Divide(now, q.Fleet, &snap.clients, self, q.Report, q.TTL)
	for _, id := range expired {
		snap.clients.Delete(id) // expired: the copy counts them as Redis does
	}
	if l.policy.Keeps(now, q, prev, self >= 0, share) {
		// The client's entry, which only this stream writes, stays as it
		// is in Redis and in the copy: the bucket's sums do not change, and
		// the share Envoy holds lapses by the entry's expiry.
		it.out.Share = l.policy.Kept(prev, share)
		return false
	}
	it.share, it.cur = share, cur
	it.args, it.next = l.commitArgs(now, q.Fleet, q.Report.Client, share, cur, expired, snap.version, it.reread)
	return true
}

// written reads the commit script's answer to it's write: done, with its
// result set, or again, the hash having been read into the copy to divide
// on again.
func (l *Ledger) written(it *item) (again bool, err error) {
	v, err := it.cmd.Result()
	if err != nil {
		return false, err
	}
	b := it.b
	if n, ok := v.(int64); ok && n == 1 {
		b.snap.clients.Set(it.q.Report.Client, it.cur)
		b.snap.version = it.next // the division saw the hash as it was
		it.out.Share = it.share
		return false, nil
	}
	reply, ok := v.([]any)
	if !ok {
		return false, fmt.Errorf("%w: commit answered %T", errState, v)
	}
	if !it.reread || len(reply) > 0 && isInt(reply[0]) {
		it.out.Share, err = l.capped(b, it.q.Fleet, it.q.Report.Client, it.share, reply)
		return false, err
	}
	fresh, err := parseSnapshot(reply)
	if err != nil {
		return false, err
	}
	*b.snap = fresh
	return true, nil
}

// commitArgs are commit.lua's arguments for writing cur, the state of
// client's share, divided on version, and the version the write sets.
// The numbers, the client's field and its state are formatted into one
// string, of which the arguments are parts: a write costs a handful of
// allocations, not one per number.
func (l *Ledger) commitArgs(now time.Time, f rlqs.Fleet, client string, share rlqs.Share, cur rlqs.ClientState, expired []string, version string, reread bool) (args []any, next string) {
	var arr [256]byte
	buf := append(arr[:0], version...)
	buf = append(buf, ',')
	nextAt := len(buf)
	buf = strconv.AppendUint(buf, rand.Uint64(), 36)
	nextEnd := len(buf)
	buf = append(buf, ',', '0')
	if reread {
		buf[len(buf)-1] = '1'
	}
	for _, v := range [...]uint64{
		uint64(max(cur.Expires.Sub(now).Milliseconds()+1, 1)),
		msDown(now), // rounded down: a share the script finds expired has expired
		min(rlqs.FleetRate(f), maxScriptValue), min(f.Burst, maxScriptValue), minBurst,
		share.Rate, share.Burst, msUp(now.Add(l.grace())), uint64(scanGap.Milliseconds()),
	} {
		buf = append(buf, ',')
		buf = strconv.AppendUint(buf, v, 10)
	}
	headEnd := len(buf)
	buf = append(buf, clientPrefix...)
	buf = append(buf, client...)
	fieldEnd := len(buf)
	buf = appendState(buf, cur)
	s := string(buf)
	args = make([]any, 3, 3+len(expired))
	args[0], args[1], args[2] = s[:headEnd], s[headEnd:fieldEnd], s[fieldEnd:]
	for _, id := range expired {
		args = append(args, clientPrefix+id)
	}
	return args, s[nextAt:nextEnd]
}

// capped reads the commit script's answer to a write it capped on the
// bucket's current state, which the cache may not hold: the cache keeps
// the client's state as written and is marked stale.
func (l *Ledger) capped(b *bucket, f rlqs.Fleet, client string, share rlqs.Share, reply []any) (rlqs.Share, error) {
	c, err := parseCapped(reply)
	if err != nil {
		return rlqs.Share{}, err
	}
	l.capCount.Add(1)
	b.snap.clients.Set(client, c.state)
	b.snap.version = staleVersion
	got := rlqs.Share{
		Rate:    c.state.Rate,
		Burst:   c.state.Burst,
		Expires: share.Expires,
		Changed: !c.oldLive || c.state.Rate != c.oldRate || c.state.Burst != c.oldBurst,
		Recheck: share.Recheck,
	}
	// The division saw a stale state, so its Recheck may miss a decrease
	// another replica made: a share capped here, or one below an even
	// split of the rate when the script counted the clients, is checked
	// again when the script says it may get more.
	if !c.freed.IsZero() && (got.Rate < share.Rate || c.live > 0 && got.Rate < rlqs.FleetRate(f)/c.live) {
		got.Recheck = c.freed
	}
	return got, nil
}

func isInt(v any) bool {
	_, ok := v.(int64)
	return ok
}

// bucketsOf sets the cache entry of each item, sweeping the cache now and
// then: a bucket whose clients have all expired is dropped.
func (l *Ledger) bucketsOf(items []*item, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, it := range items {
		l.calls++
		if l.calls%sweepEvery == 0 || len(l.buckets) >= maxCached {
			l.sweep(now)
		}
		b := l.buckets[it.hkey]
		if b == nil {
			b = &bucket{}
			l.buckets[it.hkey] = b
		}
		it.b = b
	}
}

// sweep drops the cache entries of buckets with no unexpired client, and
// everything when the cache is still full. An entry in use is kept.
func (l *Ledger) sweep(now time.Time) {
	for k, b := range l.buckets {
		if !b.mu.TryLock() {
			continue
		}
		if b.snap == nil || !anyLive(&b.snap.clients, now) {
			delete(l.buckets, k)
		}
		b.mu.Unlock()
	}
	if len(l.buckets) >= maxCached {
		l.buckets = make(map[string]*bucket)
	}
}

func anyLive(clients *rlqs.Clients, now time.Time) bool {
	for _, c := range clients.All() {
		if c.Expires.After(now) {
			return true
		}
	}
	return false
}

// commit runs commit.lua for every item in one pipeline, and again as
// EVAL, in one more, for the items whose node had lost the script.
func (l *Ledger) commit(ctx context.Context, items []*item) {
	p := l.c.Pipeline()
	for _, it := range items {
		it.cmd = p.EvalSha(ctx, commitHash, []string{it.hkey}, it.args...)
	}
	_, _ = p.Exec(ctx) // each command holds its own error
	l.roundTrips.Add(1)
	var lost []*item
	for _, it := range items {
		if err := it.cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			lost = append(lost, it)
		}
	}
	if len(lost) == 0 {
		return
	}
	p = l.c.Pipeline()
	for _, it := range lost {
		it.cmd = p.Eval(ctx, commitSource, []string{it.hkey}, it.args...)
	}
	_, _ = p.Exec(ctx)
	l.roundTrips.Add(1)
}

// snapshotOf reads a bucket's hash as HGETALL returned it.
func snapshotOf(m map[string]string) (snapshot, error) {
	reply := make([]any, 0, 2*len(m))
	for f, v := range m {
		reply = append(reply, f, v)
	}
	return parseSnapshot(reply)
}
