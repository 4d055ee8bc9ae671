package window

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed take.lua
var takeSource string

var takeScript = redis.NewScript(takeSource)

// scripter is the part of a go-redis client that Redis uses.
type scripter interface {
	EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd
	Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd
	ScriptLoad(ctx context.Context, script string) *redis.StringCmd
	Ping(ctx context.Context) *redis.StatusCmd
}

// Redis is a Store whose counters live in Redis and are shared by every
// replica that uses the same server and key prefix. Each Take is one round
// trip: one EVALSHA of an embedded Lua script that checks and counts all
// counters of the request atomically.
//
// The client should have retries off (MaxRetries: -1), since a retried
// script could count twice, and ContextTimeoutEnabled on, so that a request's
// deadline bounds the call. A Redis is safe for concurrent use; it does not
// own the client and does not close it.
type Redis struct {
	client     scripter
	roundTrips atomic.Uint64
}

// NewRedis returns a store over client (a *redis.Client, or anything with
// the same script methods).
func NewRedis(client scripter) *Redis {
	return &Redis{client: client}
}

// Ping checks that Redis answers, and loads the script so the first request
// does not pay for it.
func (s *Redis) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("%w: ping: %w", ErrStore, err)
	}
	if err := s.client.ScriptLoad(ctx, takeSource).Err(); err != nil {
		return fmt.Errorf("%w: script load: %w", ErrStore, err)
	}
	return nil
}

// RoundTrips returns how many calls this store has sent to Redis, for
// measuring round trips per decision.
func (s *Redis) RoundTrips() uint64 { return s.roundTrips.Load() }

// Take checks every request against its counter at now and, only if every
// non-shadow request has room, counts them all, in one round trip. It writes
// one Result per request into res (len(res) >= len(reqs)). now should be the
// time the replicas agree on (see package doc); Redis's own clock only runs
// the TTLs.
func (s *Redis) Take(ctx context.Context, now time.Time, reqs []Request, res []Result) (bool, error) {
	if len(reqs) == 0 {
		return true, nil
	}
	nowMs := now.UnixMilli()
	keys := make([]string, 0, len(reqs)+1)
	args := make([]any, 0, 5*len(reqs))
	var buf []byte
	for i := range reqs {
		r := &reqs[i]
		w := AtMillis(nowMs, r.Size.Milliseconds())
		buf = AppendWindow(append(buf[:0], r.Key...), w)
		keys = append(keys, string(buf))
		flags := 0
		if r.Shadow {
			flags |= 1
		}
		if r.Refund {
			flags |= 2
		}
		if r.Algorithm == SlidingWindow {
			flags |= 4
			buf = AppendWindow(append(buf[:0], r.Key...), w.Previous())
			keys = append(keys, string(buf))
		}
		args = append(args,
			strconv.FormatUint(r.Limit, 10),
			strconv.FormatUint(r.Hits, 10),
			strconv.FormatInt(r.ttl(), 10),
			strconv.Itoa(flags),
			strconv.FormatFloat(r.weight(w, nowMs), 'g', -1, 64))
	}
	return s.run(ctx, keys, args, res[:len(reqs)])
}

func (s *Redis) run(ctx context.Context, keys []string, args []any, res []Result) (bool, error) {
	s.roundTrips.Add(1)
	v, err := s.client.EvalSha(ctx, takeScript.Hash(), keys, args...).Result()
	if err != nil && isNoScript(err) {
		// NOSCRIPT means nothing ran (a restarted or flushed Redis), so
		// sending the script itself cannot count twice.
		s.roundTrips.Add(1)
		v, err = s.client.Eval(ctx, takeSource, keys, args...).Result()
	}
	if err != nil {
		return false, fmt.Errorf("%w: take %q: %w", ErrStore, keys[0], err)
	}
	return parseTake(v, res)
}

func isNoScript(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && len(re.Error()) >= 8 && re.Error()[:8] == "NOSCRIPT"
}

// parseTake reads the script's reply {allowed, (count, previous, over)...}.
func parseTake(v any, res []Result) (bool, error) {
	vals, ok := v.([]any)
	if !ok || len(vals) != 1+3*len(res) {
		return false, fmt.Errorf("%w: unexpected script reply %T of %d values", ErrStore, v, len(vals))
	}
	ints := func(i int) (int64, error) {
		n, ok := vals[i].(int64)
		if !ok || n < 0 {
			return 0, fmt.Errorf("%w: unexpected script value %v", ErrStore, vals[i])
		}
		return n, nil
	}
	allowed, err := ints(0)
	if err != nil {
		return false, err
	}
	for i := range res {
		c, err := ints(1 + 3*i)
		if err != nil {
			return false, err
		}
		p, err := ints(2 + 3*i)
		if err != nil {
			return false, err
		}
		o, err := ints(3 + 3*i)
		if err != nil {
			return false, err
		}
		res[i] = Result{Count: uint64(c), Previous: uint64(p), Over: o == 1}
	}
	return allowed == 1, nil
}
