package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// The take script's parts: take.lua, its head (the protocol, the call's
// state, the short form); one section per algorithm, in lua/; run.lua, the
// full form and the loop over the requests.
var (
	//go:embed take.lua
	takeHead string
	//go:embed lua/fixed.lua
	fixedLua string
	//go:embed lua/sliding.lua
	slidingLua string
	//go:embed lua/bucket.lua
	bucketLua string
	//go:embed lua/log.lua
	logLua string
	//go:embed run.lua
	takeRun string
)

// takeSections are the algorithms' sections of the take script, in the
// order of window.Algorithm (a test checks it covers them all).
var takeSections = []string{
	window.FixedWindow:   fixedLua,
	window.SlidingWindow: slidingLua,
	window.TokenBucket:   bucketLua,
	window.SlidingLog:    logLua,
}

// takeSource is the take script, assembled when the package initializes:
// the head, the algorithms' sections, the run; one script, so one SHA and
// one EVALSHA per call however many algorithms a batch holds.
var takeSource = takeHead + strings.Join(takeSections, "") + takeRun

var takeScript = redis.NewScript(takeSource)

// takeHash is the SHA1 of takeSource, EVALSHA's second argument.
var takeHash = takeScript.Hash()

//go:embed cross.lua
var crossHead string

// crossSource is the take script for a call on several hash slots of one
// cluster node: cross.lua's head, which reads the keys from ARGV and checks
// that the node serves them all, then the take script unchanged.
var crossSource = crossHead + takeSource

// crossHash is the SHA1 of crossSource.
var crossHash = redis.NewScript(crossSource).Hash()

// script sends one call of the take script (args from callBuf.build) and
// counts its round trips; see eval.
func (s *Store) script(ctx context.Context, args []any) (any, error) {
	v, trips, err := s.eval(ctx, args)
	s.roundTrips.Add(uint64(trips))
	return v, err
}

// eval sends one call of the take script and, after an answer that means
// the script did not run, sends it again (see redo). trips is how many round
// trips that took: 1, or 2 when a node had lost the script.
func (s *Store) eval(ctx context.Context, args []any) (v any, trips int, err error) {
	cmd := scriptCmd(ctx, false, args)
	if err = s.process(ctx, cmd); err != nil {
		v, trips, err = s.redo(ctx, args, err)
		return v, trips + 1, err
	}
	return cmd.Val(), 1, nil
}

// redo sends the call args again, through the store's client, after err,
// for as long as the answer means the script did not run and ctx allows:
//
//   - NOSCRIPT (a restarted or flushed Redis, a cluster node that never saw
//     the script): the source itself goes as EVAL, which also caches it for
//     the next EVALSHA;
//   - on a cluster, MOVED and ASK (a slot that moved in a reshard or a
//     failover; the cluster client follows the redirection and learns the
//     new layout), TRYAGAIN (a slot half migrated, some of the call's keys
//     on each side), CLUSTERDOWN, READONLY and LOADING (a node that is not,
//     or not yet, the slot's master), NOTLOCAL (cross.lua's: a key of a
//     node's call that the node does not serve), and a connection that
//     could not be made (nothing was sent): again after a pause.
//
// Anything else, above all a timeout or a connection lost while the call was
// out, is returned as it is: the script may have run, and a second run
// would count twice. trips is the round trips redo took.
func (s *Store) redo(ctx context.Context, args []any, err error) (v any, trips int, _ error) {
	source := false
	for {
		switch {
		case isNoScript(err) && !source:
			source = true
		case s.shards != nil && notRun(err):
			if isDial(err) {
				s.shards.ReloadState(ctx) // the node may be gone for good: ask the others
			}
			if pause(ctx, trips) != nil {
				return nil, trips, err
			}
		default:
			return nil, trips, err
		}
		cmd := scriptCmd(ctx, source, args)
		err = s.process(ctx, cmd)
		trips++
		if err == nil {
			return cmd.Val(), trips, nil
		}
	}
}

// ErrUnconfirmed reports a script call that ran but whose writes fewer
// replicas acknowledged than Options.WaitReplicas asks, within its deadline:
// what it counted may be dropped by a failover. It is not sent again (it may
// also survive, and would then count twice); errors that wrap it also wrap
// window.ErrStore, so the caller applies its failure mode.
var ErrUnconfirmed = errors.New("redisstore: writes not acknowledged by a replica")

// process sends cmd, a script call, and with Options.WaitReplicas a WAIT
// behind it on the same connection, pipelined (one round trip) when the
// client can. It returns cmd's error, or, once the script ran, an error
// wrapping ErrUnconfirmed when the WAIT did not confirm its writes.
func (s *Store) process(ctx context.Context, cmd redis.Cmder) error {
	if s.wait == 0 || s.promotable != nil && s.promotable.None() {
		return s.client.Process(ctx, cmd)
	}
	wait := s.waitCmd(ctx)
	if s.pipe != nil {
		p := s.pipe.Pipeline()
		_ = p.Process(ctx, cmd)
		_ = p.Process(ctx, wait)
		_, _ = p.Exec(ctx) // the commands carry their errors
	} else if err := s.client.Process(ctx, cmd); err == nil {
		_ = s.client.Process(ctx, wait)
	}
	if err := cmd.Err(); err != nil {
		return err
	}
	n, err := wait.Result()
	if err == nil && n >= int64(s.wait) {
		return nil
	}
	if s.promotable != nil {
		// A WAIT that ran out of time (its own timeout, or the deadline)
		// had no more acknowledgements than 0.
		if p, ok := s.promotable.Count(); ok && n >= int64(min(p, s.wait)) {
			return nil // no replica a failover could promote lacks it
		}
	}
	if err != nil {
		return fmt.Errorf("%w: WAIT: %w", ErrUnconfirmed, err)
	}
	return fmt.Errorf("%w: %d of %d acknowledged", ErrUnconfirmed, n, s.wait)
}

// waitCmd returns the WAIT that follows a script call under ctx: for
// Options.WaitReplicas replicas, for at most three quarters of the time left
// to ctx's deadline (or of Options.Timeout without one), so that its answer
// comes back before the deadline cuts the connection; at least 1 ms, since
// WAIT 0 would wait for ever.
func (s *Store) waitCmd(ctx context.Context) *redis.IntCmd {
	left := s.timeout
	if dl, ok := ctx.Deadline(); ok {
		left = time.Until(dl)
	}
	return redis.NewIntCmd(ctx, "wait", s.wait, max(int64(left*3/4/time.Millisecond), 1))
}

// notRun reports whether err, the answer of a cluster node to a script
// call, means the script did not run (see redo), NOSCRIPT aside.
func notRun(err error) bool {
	if _, ok := redis.IsMovedError(err); ok {
		return true
	}
	if _, ok := redis.IsAskError(err); ok {
		return true
	}
	return redis.IsTryAgainError(err) || redis.IsClusterDownError(err) || redis.IsReadOnlyError(err) ||
		redis.IsLoadingError(err) || isDial(err) || isNotLocal(err)
}

// isNotLocal reports whether err is cross.lua's answer that a key of the
// call is not served by the node it went to: nothing was written.
func isNotLocal(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOTLOCAL ")
}

// isDial reports whether err is a failure to connect, before anything was
// sent.
func isDial(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// pause waits before the n-th redo (from 0): not at all before the first,
// then 2 ms doubling up to 100 ms, or until ctx ends, when it returns ctx's
// error. A slot in migration or a master being replaced answers again
// within milliseconds to seconds; the caller's deadline bounds the wait.
func pause(ctx context.Context, n int) error {
	if n == 0 {
		return ctx.Err()
	}
	d := min(2*time.Millisecond<<min(n-1, 6), 100*time.Millisecond)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// noRetryCmd is a script call that go-redis must never resend on its own:
// a ClusterClient retries timeouts and EOFs whatever MaxRetries says, unless
// the command says NoRetry, and a script that ran once must not count twice.
// Redirections (MOVED, ASK) are still followed: the script did not run.
// The store sends again itself what it knows did not run (see redo).
type noRetryCmd struct{ *redis.Cmd }

func (noRetryCmd) NoRetry() bool { return true }

// scriptCmd returns the call args (from callBuf.build) as EVALSHA of the take
// script, or as EVAL of its source: it rewrites args' first two values.
func scriptCmd(ctx context.Context, source bool, args []any) noRetryCmd {
	return evalCmd(ctx, source, takeSource, takeHash, args)
}

// evalCmd returns args as EVAL of src, when source, else as EVALSHA of its
// SHA1 hash: it rewrites args' first two values.
func evalCmd(ctx context.Context, source bool, src, hash string, args []any) noRetryCmd {
	if source {
		args[0], args[1] = "eval", src
	} else {
		args[0], args[1] = "evalsha", hash
	}
	return noRetryCmd{redis.NewCmd(ctx, args...)}
}

// crossArgs rewrites args, a call from callBuf.build, into dst as a call of
// crossSource (see cross.lua): no declared keys, take.lua's arguments, the
// keys, their number. dst is returned for reuse; args is left as it was.
func crossArgs(dst, args []any) []any {
	nkeys := args[2].(int)
	keys, rest := args[3:3+nkeys], args[3+nkeys:]
	dst = append(dst[:0], "evalsha", crossHash, 0)
	dst = append(dst, rest...)
	dst = append(dst, keys...)
	return append(dst, nkeys)
}

// crossCmd returns the call args (from crossArgs) as EVALSHA of crossSource,
// or as EVAL of it: it rewrites args' first two values.
func crossCmd(ctx context.Context, source bool, args []any) noRetryCmd {
	return evalCmd(ctx, source, crossSource, crossHash, args)
}

// isRefused reports whether err, the answer to SCRIPT LOAD of crossSource,
// says the node cannot run it: Redis before 7.0 reads no shebang line.
func isRefused(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.Contains(msg, "compiling script") || strings.Contains(msg, "shebang")
}

func isNoScript(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOSCRIPT")
}
