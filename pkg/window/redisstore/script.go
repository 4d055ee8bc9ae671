package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed take.lua
var takeSource string

var takeScript = redis.NewScript(takeSource)

// takeHash is the SHA1 of take.lua, EVALSHA's second argument.
var takeHash = takeScript.Hash()

// script sends one call of the take script (args from callBuf.build) and
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

// scriptCmd returns the call args (from callBuf.build) as EVALSHA of the take
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
