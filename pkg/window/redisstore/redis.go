package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

//go:embed take.lua
var takeSource string

var takeScript = redis.NewScript(takeSource)

// scripter is the part of a go-redis client that Redis uses. A
// redis.UniversalClient (*redis.Client, a Sentinel failover client or a
// *redis.ClusterClient) has it.
type scripter interface {
	Process(ctx context.Context, cmd redis.Cmder) error
	ScriptLoad(ctx context.Context, script string) *redis.StringCmd
	Ping(ctx context.Context) *redis.StatusCmd
}

// sharded is the part of a *redis.ClusterClient that tells Redis its
// counters are spread over nodes.
type sharded interface {
	ForEachShard(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error
}

// Store is a window.Store whose counters live in Redis and are shared by every
// replica that uses the same server and key prefix.
//
// On a single node or behind Sentinel each Take is one round trip: one
// EVALSHA of an embedded Lua script that checks and counts all counters of
// the request atomically.
//
// On Redis Cluster a script may only touch keys of one hash slot. Counter
// keys carry a hash tag per descriptor (see AppendKey), so a request whose
// counters share a slot (always the case with one descriptor) is still one
// EVALSHA. A request over several slots runs one script per slot, all in
// parallel. If any slot denies, the slots that allowed, and so counted, are
// given their hits back in a second parallel step: a denied request still
// consumes no quota once Take returns. In between, other requests can see those hits and be denied, so
// under concurrency a multi-slot counter may admit fewer than its limit
// (never more); a counter whose request's other counters never deny admits
// exactly its limit. Refunds (window.Request.Refund) of a multi-slot request are
// applied after every slot has allowed, in one more parallel step. In cluster mode
// every window.Request.Key must hold a hash tag (AppendKey's keys do); an untagged
// sliding-window key fails with CROSSSLOT.
//
// When some slots fail (a cluster node down) and others answer, Take returns
// a *window.PartialError naming the failed requests; see window.PartialError.
//
// Every Take is bounded by Options.Timeout (see callDeadline), so a
// caller need not wrap its context in a timeout of its own. A batched Take
// waits for the batch call in flight and then for its own; a batch call is
// bounded by the earliest deadline of the Takes in it, and a Take whose
// deadline passed before its batch went out is not sent. So against a
// stalled Redis a Take ends about Timeout after it began; only a context
// deadline sooner than Timeout can be overrun, by the call in flight.
//
// Script calls are never retried by go-redis (a retried script could count
// twice), except after a NOSCRIPT error or a cluster redirection, when
// nothing ran. The client should also have ContextTimeoutEnabled on, so that
// the deadline bounds the call, and MaxRetries -1. A Redis is safe for
// concurrent use; it does not own the client and does not close it.
type Store struct {
	client     scripter
	shards     sharded // nil unless the client is a cluster client
	timeout    time.Duration
	roundTrips atomic.Uint64
	batch      *batcher // nil unless made by NewBatched
}

// Options configure a Redis store. Zero fields take their defaults.
type Options struct {
	// Timeout bounds each Take; default 1s. A rate-limit service should set
	// it below its callers' own timeout (Envoy's filter waits 20 ms by
	// default), so that a failure mode is applied before they give up.
	Timeout time.Duration
}

// New returns a store over client: a redis.UniversalClient
// (*redis.Client, a Sentinel failover client, *redis.ClusterClient), or
// anything with the same methods. A client with a ForEachShard method is
// treated as a cluster: counters are grouped by hash slot.
func New(client scripter, o Options) *Store {
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	s := &Store{client: client, timeout: o.Timeout}
	s.shards, _ = client.(sharded)
	return s
}

// callDeadline is when a Take that starts at start under ctx must end:
// timeout after start, or sooner when ctx has a deadline, nine tenths of the
// way to it, which leaves the caller a tenth of its budget to answer (with a
// failure mode) before it gives up.
func callDeadline(ctx context.Context, start time.Time, timeout time.Duration) time.Time {
	dl := start.Add(timeout)
	if cdl, ok := ctx.Deadline(); ok {
		if left := start.Add(cdl.Sub(start) * 9 / 10); left.Before(dl) {
			dl = left
		}
	}
	return dl
}

// Ping checks that Redis answers, and loads the script so the first request
// does not pay for it. On a cluster it pings and loads the script on every
// node it knows, and fails only if none answers: a cluster with one node
// down still serves the other nodes' slots.
func (s *Store) Ping(ctx context.Context) error {
	if s.shards != nil {
		var ok atomic.Int64
		err := s.shards.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
			if err := c.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("ping %s: %w", c.Options().Addr, err)
			}
			if err := c.ScriptLoad(ctx, takeSource).Err(); err != nil {
				return fmt.Errorf("script load %s: %w", c.Options().Addr, err)
			}
			ok.Add(1)
			return nil
		})
		if err != nil && ok.Load() == 0 {
			return fmt.Errorf("%w: %w", window.ErrStore, err)
		}
		return nil
	}
	if err := s.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("%w: ping: %w", window.ErrStore, err)
	}
	if err := s.client.ScriptLoad(ctx, takeSource).Err(); err != nil {
		return fmt.Errorf("%w: script load: %w", window.ErrStore, err)
	}
	return nil
}

// RoundTrips returns how many calls this store has sent to Redis, for
// measuring round trips per decision. On a cluster, one parallel step over
// several slots counts as one.
func (s *Store) RoundTrips() uint64 { return s.roundTrips.Load() }

// Take checks every request against its counter at now and, only if every
// non-shadow request has room, counts them all. It writes one window.Result per
// request into res (len(res) >= len(reqs)). now should be the time the
// replicas agree on (see package doc); Redis's own clock only runs the TTLs.
// Errors wrap window.ErrStore; on a cluster they may be a *window.PartialError.
func (s *Store) Take(ctx context.Context, now time.Time, reqs []window.Request, res []window.Result) (bool, error) {
	if len(reqs) == 0 {
		return true, nil
	}
	nowMs := now.UnixMilli()
	res = res[:len(reqs)]
	dl := callDeadline(ctx, time.Now(), s.timeout)
	if s.batch != nil {
		// No context per Take here: the batch's call gets one.
		return s.batch.take(ctx, dl, nowMs, reqs, res)
	}
	ctx, cancel := context.WithDeadline(ctx, dl)
	defer cancel()
	if s.shards != nil {
		if groups := groupBySlot(nowMs, reqs); len(groups) > 1 {
			return s.takeSlots(ctx, nowMs, reqs, res, groups)
		}
	}
	args, _ := appendCall(nil, nil, nowMs, reqs, nil)
	return s.run(ctx, args, res)
}

// takeHash is the SHA1 of take.lua, EVALSHA's second argument.
var takeHash = takeScript.Hash()

// The script's arguments are built by the functions below straight into the
// []any that go-redis writes: numbers as integers (go-redis formats them into
// its write buffer, no strings) and keys as slices of one byte arena. The
// batch worker reuses the list, the arena and its triples from call to call;
// what is left is boxing each key slice, and each other number of 256 or
// more (Go boxes smaller ones without allocating): per triple its ttl and
// large limits, per full-form counter its ttl, large limits and weight.

// callSize is how many requests a call of reqs[idx] (all of reqs when idx
// is nil) carries.
func callSize(reqs []window.Request, idx []int) int {
	if idx != nil {
		return len(idx)
	}
	return len(reqs)
}

// callReq is the j-th request of a call of reqs[idx].
func callReq(reqs []window.Request, idx []int, j int) *window.Request {
	if idx != nil {
		return &reqs[idx[j]]
	}
	return &reqs[j]
}

// shortCall reports whether a call of reqs[idx] goes in the script's short
// form (see take.lua): every request a plain counter (plain), each
// on a key of its own.
func shortCall(reqs []window.Request, idx []int) bool {
	for j := range callSize(reqs, idx) {
		r := callReq(reqs, idx, j)
		if !plain(r) {
			return false
		}
		for i := range j {
			if o := callReq(reqs, idx, i); o.Key == r.Key && o.Size == r.Size {
				return false // the same counter twice: the full form adds them up
			}
		}
	}
	return true
}

// plain reports whether r is a plain counter, which the script's short form
// can carry: a fixed window, not a shadow, not a refund, hits >= 1.
func plain(r *window.Request) bool {
	return r.Algorithm != window.SlidingWindow && !r.Shadow && !r.Refund && r.Hits >= 1
}

// appendCall appends to dst[:0] a whole script call for reqs[idx]: EVALSHA,
// the hash, the key count, the keys and the arguments. Keys are appended to
// arena, which is returned for reuse once the call is done.
func appendCall(dst []any, arena []byte, nowMs int64, reqs []window.Request, idx []int) ([]any, []byte) {
	dst, arena = appendKeys(callStart(dst), arena, nowMs, reqs, idx)
	dst, head := callArgs(dst)
	var t triples
	dst = appendArgs(dst, &t, shortCall(reqs, idx), nowMs, reqs, idx)
	return t.appendTo(dst, head), arena
}

// callStart begins a call in dst[:0]: EVALSHA, the hash and a place for the
// key count. The keys follow (appendKeys), then callArgs.
func callStart(dst []any) []any { return append(dst[:0], "evalsha", takeHash, 0) }

// callArgs ends the keys of a call begun by callStart and begins its
// arguments with a place for the count of triples, at head (see
// triples.appendTo). The requests' arguments follow (appendArgs).
func callArgs(dst []any) (_ []any, head int) {
	dst[2] = len(dst) - 3
	return append(dst, 0), len(dst)
}

// triples gathers the distinct (limit, hits, TTL) triples of a call's
// short-form counters. Each such counter names its triple by number, and
// the triples go once at the end of the call: under load most counters of a
// batch share a rule, so Redis reads one argument per counter instead of
// three (see take.lua). The zero value holds none; it is not safe for
// concurrent use.
type triples struct {
	list []triple
	// index numbers the triples once there are more than triplesScanned:
	// hits (and, with overrides, limits) come from requests, so a batch can
	// hold as many triples as counters, and a scan would cost the one batch
	// worker quadratic time. It is in use exactly when the list is longer
	// than triplesScanned; kept, cleared, from call to call.
	index map[triple]int
}

// triplesScanned is how many triples number finds by scanning the list.
const triplesScanned = 8

type triple struct {
	limit, hits uint64
	ttl         int64 // milliseconds
}

// number returns the number, from 1, of r's triple, adding it if new.
func (t *triples) number(r *window.Request) int {
	want := triple{r.Limit, r.Hits, r.TTL().Milliseconds()}
	if len(t.list) <= triplesScanned {
		for i, have := range t.list {
			if have == want {
				return i + 1
			}
		}
		if len(t.list) < triplesScanned {
			t.list = append(t.list, want)
			return len(t.list)
		}
		if t.index == nil {
			t.index = make(map[triple]int)
		}
		for i, have := range t.list {
			t.index[have] = i + 1
		}
	}
	if n, ok := t.index[want]; ok {
		return n
	}
	t.list = append(t.list, want)
	t.index[want] = len(t.list)
	return len(t.list)
}

// appendTo ends a call: it appends the triples to dst, writes their count
// to dst[head], the call's first argument, and empties t for the next call.
func (t *triples) appendTo(dst []any, head int) []any {
	dst[head] = len(t.list)
	for _, have := range t.list {
		dst = append(dst, have.limit, have.hits, have.ttl)
	}
	if len(t.list) > triplesScanned {
		clear(t.index)
	}
	t.list = t.list[:0]
	return dst
}

// shortHeads are the short form's request heads -1, -2, ... boxed once: a
// negative integer would otherwise be boxed anew for every request.
var shortHeads = func() []any {
	h := make([]any, 16)
	for i := range h {
		h[i] = -(i + 1)
	}
	return h
}()

// shortHead returns the boxed head of a short-form request of n counters.
func shortHead(n int) any {
	if n >= 1 && n <= len(shortHeads) {
		return shortHeads[n-1]
	}
	return -n
}

// appendKeys appends the script keys of a call of reqs[idx] to dst, each a
// slice of arena: per request its current window's key and, for a sliding
// window, the previous window's.
func appendKeys(dst []any, arena []byte, nowMs int64, reqs []window.Request, idx []int) ([]any, []byte) {
	for j := range callSize(reqs, idx) {
		r := callReq(reqs, idx, j)
		w := window.AtMillis(nowMs, r.Size.Milliseconds())
		// A slice taken before arena grows keeps pointing at the old array,
		// whose bytes are never written again: it stays valid.
		from := len(arena)
		arena = window.AppendWindow(append(arena, r.Key...), w)
		dst = append(dst, arena[from:len(arena):len(arena)])
		if r.Algorithm == window.SlidingWindow {
			from = len(arena)
			arena = window.AppendWindow(append(arena, r.Key...), w.Previous())
			dst = append(dst, arena[from:len(arena):len(arena)])
		}
	}
	return dst, arena
}

// appendArgs appends one script request, all counters of reqs[idx] (all of
// reqs when idx is nil), to dst: in the short form (short, from shortCall) minus the
// counter count and per counter the number of its triple, added to t; else
// the count and five values per counter.
func appendArgs(dst []any, t *triples, short bool, nowMs int64, reqs []window.Request, idx []int) []any {
	n := callSize(reqs, idx)
	if short {
		dst = append(dst, shortHead(n))
		for j := range n {
			dst = append(dst, t.number(callReq(reqs, idx, j)))
		}
		return dst
	}
	dst = append(dst, n)
	for j := range n {
		r := callReq(reqs, idx, j)
		w := window.AtMillis(nowMs, r.Size.Milliseconds())
		flags := 0
		if r.Shadow {
			flags |= 1
		}
		if r.Refund {
			flags |= 2
		}
		if r.Algorithm == window.SlidingWindow {
			flags |= 4
		}
		dst = append(dst, r.Limit, r.Hits, r.TTL().Milliseconds(), flags, r.Weight(w, nowMs))
	}
	return dst
}

func (s *Store) run(ctx context.Context, args []any, res []window.Result) (bool, error) {
	v, err := s.script(ctx, args)
	if err != nil {
		return false, fmt.Errorf("%w: take %q: %w", window.ErrStore, args[3], err)
	}
	return parseTake(v, res)
}

// script sends one call of the take script (args from appendCall) and
// counts its round trips; see eval.
func (s *Store) script(ctx context.Context, args []any) (any, error) {
	v, trips, err := s.eval(ctx, args)
	s.roundTrips.Add(uint64(trips))
	return v, err
}

// eval sends one call of the take script: EVALSHA, and the source itself
// after NOSCRIPT, which means nothing ran (a restarted or flushed Redis, a
// cluster node that never saw the script), so sending it again cannot count
// twice; EVAL also caches the script for the next EVALSHA. trips is how many
// round trips that took, 1 or 2.
func (s *Store) eval(ctx context.Context, args []any) (v any, trips int, err error) {
	cmd := scriptCmd(ctx, false, args)
	err = s.client.Process(ctx, cmd)
	trips = 1
	if err != nil && isNoScript(err) {
		cmd = scriptCmd(ctx, true, args)
		err = s.client.Process(ctx, cmd)
		trips = 2
	}
	return cmd.Val(), trips, err
}

// noRetryCmd is a script call that go-redis must never resend on its own:
// a ClusterClient retries timeouts and EOFs whatever MaxRetries says, unless
// the command says NoRetry, and a script that ran once must not count twice.
// Redirections (MOVED, ASK) are still followed: the script did not run.
type noRetryCmd struct{ *redis.Cmd }

func (noRetryCmd) NoRetry() bool { return true }

// scriptCmd returns the call args (from appendCall) as EVALSHA of the take
// script, or as EVAL of its source: it rewrites args' first two values.
func scriptCmd(ctx context.Context, source bool, args []any) noRetryCmd {
	if source {
		args[0], args[1] = "eval", takeSource
	} else {
		args[0], args[1] = "evalsha", takeHash
	}
	return noRetryCmd{redis.NewCmd(ctx, args...)}
}

func isNoScript(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOSCRIPT")
}

// slotGroup is the requests of one Take that share a hash slot.
type slotGroup struct {
	slot  uint16
	take  []int // indexes of requests that count (or only check)
	give  []int // indexes of refund requests
	err   error // set when the group's node failed
	taken bool  // the take script ran and allowed: its hits are counted
}

// groupBySlot splits reqs by the hash slot of their current window's key,
// in order of first appearance.
func groupBySlot(nowMs int64, reqs []window.Request) []*slotGroup {
	var groups []*slotGroup
	var buf []byte
	for i := range reqs {
		r := &reqs[i]
		buf = window.AppendWindow(append(buf[:0], r.Key...), window.AtMillis(nowMs, r.Size.Milliseconds()))
		id := slot(string(buf))
		var g *slotGroup
		for _, h := range groups {
			if h.slot == id {
				g = h
				break
			}
		}
		if g == nil {
			g = &slotGroup{slot: id}
			groups = append(groups, g)
		}
		if r.Refund {
			g.give = append(g.give, i)
		} else {
			g.take = append(g.take, i)
		}
	}
	return groups
}

// takeSlots is Take over several hash slots: check and count per slot in
// parallel, give back what was counted if any slot denied, then apply the
// refunds.
func (s *Store) takeSlots(ctx context.Context, nowMs int64, reqs []window.Request, res []window.Result, groups []*slotGroup) (bool, error) {
	allowed := true
	s.runGroups(ctx, nowMs, reqs, res, groups, func(g *slotGroup) []int { return g.take },
		func(g *slotGroup, ok bool) {
			g.taken = ok
			allowed = allowed && ok
		})
	if !allowed {
		// Undo the slots that counted: each counted request again as a
		// refund of its hits on its current window (floored at zero,
		// keeping the TTL), which gives back only what this call added.
		undo := make([]window.Request, len(reqs))
		for i, r := range reqs {
			r.Refund, r.Algorithm = true, window.FixedWindow
			undo[i] = r
		}
		back := slices.Clone(res) // a request that took no hits needs no undo and keeps its count
		s.runGroups(ctx, nowMs, undo, back, groups, func(g *slotGroup) []int {
			if !g.taken {
				return nil
			}
			var idx []int
			for _, i := range g.take {
				if reqs[i].Hits > 0 {
					idx = append(idx, i)
				}
			}
			return idx
		}, func(g *slotGroup, _ bool) {
			for _, i := range g.take {
				res[i].Count = back[i].Count // the count as it was before this call
			}
		})
		return false, partial(groups, len(reqs))
	}
	s.runGroups(ctx, nowMs, reqs, res, groups, func(g *slotGroup) []int { return g.give }, nil)
	return true, partial(groups, len(reqs))
}

// runGroups runs the script for idx(g) of every group that has not failed
// yet, all in parallel, writes the Results and reports each answer to done.
// A group whose call fails gets its err set.
//
// Each group is its own command rather than one ClusterClient pipeline:
// when a pipeline's retry for a failing node gives up, go-redis sets that
// error on every command of the pipeline, also on those other nodes
// answered, and a healthy slot would then look failed.
func (s *Store) runGroups(ctx context.Context, nowMs int64, reqs []window.Request, res []window.Result, groups []*slotGroup,
	idx func(*slotGroup) []int, done func(g *slotGroup, allowed bool)) {
	type call struct {
		g     *slotGroup
		idx   []int
		args  []any
		v     any
		trips int
		err   error
	}
	var calls []*call
	for _, g := range groups {
		if g.err != nil {
			continue
		}
		if ix := idx(g); len(ix) > 0 {
			args, _ := appendCall(nil, nil, nowMs, reqs, ix)
			calls = append(calls, &call{g: g, idx: ix, args: args})
		}
	}
	if len(calls) == 0 {
		return
	}
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Go(func() { c.v, c.trips, c.err = s.eval(ctx, c.args) })
	}
	wg.Wait()
	// One parallel step is one round trip; two where a node lost the
	// script and needed it sent again.
	trips := 0
	for _, c := range calls {
		trips = max(trips, c.trips)
	}
	s.roundTrips.Add(uint64(trips))
	for _, c := range calls {
		sub := make([]window.Result, len(c.idx))
		ok, err := false, c.err
		if err == nil {
			ok, err = parseTake(c.v, sub)
		}
		if err != nil {
			if !errors.Is(err, window.ErrStore) {
				err = fmt.Errorf("%w: take %q: %w", window.ErrStore, c.args[3], err)
			}
			c.g.err = err
			continue
		}
		for j, i := range c.idx {
			res[i] = sub[j]
		}
		if done != nil {
			done(c.g, ok)
		}
	}
}

// partial returns nil when no group failed, the first error when all of
// the n requests failed, and a *window.PartialError otherwise.
func partial(groups []*slotGroup, n int) error {
	var failed []int
	var first error
	for _, g := range groups {
		if g.err == nil {
			continue
		}
		if first == nil {
			first = g.err
		}
		failed = append(failed, g.take...)
		failed = append(failed, g.give...)
	}
	if first == nil {
		return nil
	}
	if len(failed) == n {
		return first
	}
	slices.Sort(failed)
	return &window.PartialError{Failed: failed, Err: first}
}

// slot returns the Redis Cluster hash slot of key, 0 to 16383: the CRC16
// (XMODEM) of its hash tag modulo 16384. The hash tag is what lies between
// the first '{' and the next '}' when that is not empty, else the whole key,
// exactly as Redis Cluster computes it.
func slot(key string) uint16 {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	return crc16(key) % 16384
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum
// Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^s[i]]
	}
	return crc
}

var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// parseTake reads the script's reply {allowed, (count, previous, over)...}.
func parseTake(v any, res []window.Result) (bool, error) {
	vals, ok := v.([]any)
	if !ok {
		return false, fmt.Errorf("%w: unexpected script reply %T", window.ErrStore, v)
	}
	return parseRequest(vals, res)
}

// replySize is how many values of the script's reply belong to a call of
// n requests, in the short form or not.
func replySize(short bool, n int) int {
	if short {
		return 1 + n
	}
	return 1 + 3*n
}

// parseRequest reads one request's part of the script's reply: status,
// then per counter either (current, previous, over) or, in the short form,
// one value.
func parseRequest(vals []any, res []window.Result) (bool, error) {
	short := len(vals) == replySize(true, len(res))
	if !short && len(vals) != replySize(false, len(res)) {
		return false, fmt.Errorf("%w: script reply of %d values for %d counters", window.ErrStore, len(vals), len(res))
	}
	status, ok := vals[0].(int64)
	switch {
	case !ok || status < -1 || status > 1:
		return false, fmt.Errorf("%w: unexpected script status %v", window.ErrStore, vals[0])
	case status == -1:
		return false, fmt.Errorf("%w: a counter key holds something other than an integer", window.ErrStore)
	}
	if short {
		for i := range res {
			v, ok := vals[1+i].(int64)
			switch {
			case !ok || status == 1 && v < 1:
				return false, fmt.Errorf("%w: unexpected script value %v", window.ErrStore, vals[1+i])
			case v >= 0:
				res[i] = window.Result{Count: uint64(v)}
			default: // denied, and this counter had no room
				res[i] = window.Result{Count: uint64(-1 - v), Over: true}
			}
		}
		return status == 1, nil
	}
	for i := range res {
		var n [3]int64
		for j := range n {
			v, ok := vals[1+3*i+j].(int64)
			if !ok || v < 0 {
				return false, fmt.Errorf("%w: unexpected script value %v", window.ErrStore, vals[1+3*i+j])
			}
			n[j] = v
		}
		res[i] = window.Result{Count: uint64(n[0]), Previous: uint64(n[1]), Over: n[2] == 1}
	}
	return status == 1, nil
}
