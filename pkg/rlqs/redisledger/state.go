package redisledger

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

// A client's field in a bucket's hash is clientPrefix + its id; its value is
// ten decimal numbers separated by commas:
//
//	demand,rate,burst,prev_rate,prev_burst,prev_until_ms,expires_ms,reported_ms,estimated,fleet
//
// with times in Unix milliseconds (0 for none) and estimated 0 or 1. A
// value of the first nine (written before fleet was kept) reads as fleet 0.
// Expires and PrevUntil are rounded up to the millisecond, so the ledger
// counts a share no shorter than in memory; Reported is rounded down.
const (
	clientPrefix = "c:"
	versionField = "v"
	// boundField holds the commit script's bound on the clients' counted
	// sums (see commit.lua); the Ledger does not read it.
	boundField  = "u"
	stateFields = 10
)

// errState marks a client's value the ledger cannot read.
var errState = errors.New("redisledger: bad client state")

// appendState appends c's encoding to dst.
func appendState(dst []byte, c rlqs.ClientState) []byte {
	est := uint64(0)
	if c.Estimated {
		est = 1
	}
	for i, v := range []uint64{c.Demand, c.Rate, c.Burst, c.PrevRate, c.PrevBurst,
		msUp(c.PrevUntil), msUp(c.Expires), msDown(c.Reported), est, c.Fleet} {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendUint(dst, v, 10)
	}
	return dst
}

// parseState reads a client's value.
func parseState(s string) (rlqs.ClientState, error) {
	var v [stateFields]uint64
	for i := range v {
		part := s
		if j := strings.IndexByte(s, ','); j >= 0 && i < stateFields-1 {
			part, s = s[:j], s[j+1:]
		} else if i == stateFields-2 && j < 0 {
			s = "0" // nine fields: no fleet kept
		} else if i < stateFields-1 {
			return rlqs.ClientState{}, fmt.Errorf("%w: %d fields, want %d", errState, i+1, stateFields)
		} else if j >= 0 {
			return rlqs.ClientState{}, fmt.Errorf("%w: more than %d fields", errState, stateFields)
		}
		n, err := strconv.ParseUint(part, 10, 64)
		if err != nil {
			return rlqs.ClientState{}, fmt.Errorf("%w: field %d: %w", errState, i+1, err)
		}
		v[i] = n
	}
	if v[8] > 1 {
		return rlqs.ClientState{}, fmt.Errorf("%w: estimated %d", errState, v[8])
	}
	for _, ms := range v[5:8] {
		if ms > maxMs {
			return rlqs.ClientState{}, fmt.Errorf("%w: time %d ms out of range", errState, ms)
		}
	}
	return rlqs.ClientState{
		Demand: v[0], Rate: v[1], Burst: v[2], PrevRate: v[3], PrevBurst: v[4],
		PrevUntil: fromMs(v[5]), Expires: fromMs(v[6]), Reported: fromMs(v[7]), Estimated: v[8] == 1, Fleet: v[9],
	}, nil
}

// maxMs is the last millisecond a time.Time converts from without
// overflowing time.UnixMilli's nanoseconds (year 2262).
const maxMs = uint64(1<<63-1) / uint64(time.Millisecond)

func msUp(t time.Time) uint64 {
	if t.IsZero() || t.UnixNano() <= 0 {
		return 0
	}
	ns := uint64(t.UnixNano())
	return (ns + uint64(time.Millisecond) - 1) / uint64(time.Millisecond)
}

func msDown(t time.Time) uint64 {
	if t.IsZero() || t.UnixNano() <= 0 {
		return 0
	}
	return uint64(t.UnixNano()) / uint64(time.Millisecond)
}

func fromMs(ms uint64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(int64(ms))
}

// snapshot is a bucket's hash as read: its version and its clients.
type snapshot struct {
	version string
	clients rlqs.Clients
}

// parseSnapshot reads a bucket's HGETALL reply (field, value, ...). A
// missing hash is version "" with no clients.
func parseSnapshot(reply []any) (snapshot, error) {
	var s snapshot
	if len(reply)%2 != 0 {
		return s, fmt.Errorf("%w: odd HGETALL reply of %d values", errState, len(reply))
	}
	s.clients.Grow(len(reply) / 2)
	for i := 0; i < len(reply); i += 2 {
		f, ok1 := reply[i].(string)
		v, ok2 := reply[i+1].(string)
		if !ok1 || !ok2 {
			return s, fmt.Errorf("%w: HGETALL reply holds %T and %T, want strings", errState, reply[i], reply[i+1])
		}
		switch {
		case f == versionField:
			if v == "" {
				return s, fmt.Errorf("%w: empty version", errState)
			}
			s.version = v
		case f == boundField:
		case strings.HasPrefix(f, clientPrefix):
			c, err := parseState(v)
			if err != nil {
				return s, fmt.Errorf("client %q: %w", f[len(clientPrefix):], err)
			}
			s.clients.Set(f[len(clientPrefix):], c)
		default:
			return s, fmt.Errorf("%w: unknown field %q", errState, f)
		}
	}
	return s, nil
}

// capped is the commit script's answer when it capped a grant on the
// bucket's current state.
type capped struct {
	state    rlqs.ClientState // the client's state as written
	oldRate  uint64           // its share before, if oldLive
	oldBurst uint64
	oldLive  bool      // it held an unexpired share
	freed    time.Time // the first moment another client's decrease stops counting
	live     uint64    // the bucket's unexpired clients, this one included; 0: not read
}

// parseCapped reads {0, rate, burst, old_rate, old_burst, old_live,
// freed_ms, live, state}.
func parseCapped(reply []any) (capped, error) {
	var c capped
	if len(reply) != 9 {
		return c, fmt.Errorf("%w: commit answered %v", errState, reply)
	}
	var n [8]uint64
	for i := range n {
		x, ok := reply[i].(int64)
		if !ok || x < 0 {
			return c, fmt.Errorf("%w: commit answered %v at %d", errState, reply[i], i)
		}
		n[i] = uint64(x)
	}
	st, ok := reply[8].(string)
	if !ok || n[0] != 0 || n[5] > 1 || n[6] > maxMs {
		return c, fmt.Errorf("%w: commit answered %v", errState, reply)
	}
	state, err := parseState(st)
	if err != nil {
		return c, err
	}
	if state.Rate != n[1] || state.Burst != n[2] {
		return c, fmt.Errorf("%w: commit wrote %q but answered %d, %d", errState, st, n[1], n[2])
	}
	return capped{state: state, oldRate: n[3], oldBurst: n[4], oldLive: n[5] == 1, freed: fromMs(n[6]), live: n[7]}, nil
}
