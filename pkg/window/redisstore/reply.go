package redisstore

import (
	"fmt"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

// The script replies with one list; each request's part of it is its
// status, then per counter either (current, previous, over) or, in the
// short form, one value (see take.lua); a TokenBucket's or SlidingLog's
// three values mean other things, and parseRequest reads them by the
// request's counters. replyValues, cutReply and parseRequest are the one
// reader of that reply.

// parseTake reads the reply v of a call of the one request r into res.
func parseTake(v any, r *take, res []window.Result) (bool, error) {
	vals, err := replyValues(v)
	if err != nil {
		return false, err
	}
	return parseRequest(vals, r, res)
}

// replyValues returns the script's reply v as its list of values.
func replyValues(v any) ([]any, error) {
	vals, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: unexpected script reply %T", window.ErrStore, v)
	}
	return vals, nil
}

// cutReply cuts the part of a request of n counters, in the short form or
// not, from the front of vals and returns it and the rest.
func cutReply(vals []any, short bool, n int) (part, rest []any, err error) {
	size := replySize(short, n)
	if size > len(vals) {
		return nil, nil, fmt.Errorf("%w: script reply of %d values is short", window.ErrStore, len(vals))
	}
	return vals[:size], vals[size:], nil
}

// replySize is how many values of the script's reply belong to a request
// of n counters, in the short form or not.
func replySize(short bool, n int) int {
	if short {
		return 1 + n
	}
	return 1 + 3*n
}

// parseRequest reads one request's part of the script's reply into res,
// one Result per counter of r, and reports whether the request was
// allowed. It tells the short form by the part's length; a TokenBucket or
// SlidingLog counter never comes in it.
func parseRequest(vals []any, r *take, res []window.Result) (bool, error) {
	res = res[:r.len()]
	short := len(vals) == replySize(true, len(res))
	if !short && len(vals) != replySize(false, len(res)) {
		return false, fmt.Errorf("%w: script reply of %d values for %d counters", window.ErrStore, len(vals), len(res))
	}
	status, ok := vals[0].(int64)
	switch {
	case !ok || status < -1 || status > 1:
		return false, fmt.Errorf("%w: unexpected script status %v", window.ErrStore, vals[0])
	case status == -1:
		return false, fmt.Errorf("%w: a counter key holds something other than its state", window.ErrStore)
	}
	if short {
		for i := range res {
			v, ok := vals[1+i].(int64)
			switch {
			case !ok || status == 1 && v < 1 || !r.at(i).Algorithm.Windowed():
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
		c := r.at(i)
		var err error
		if res[i], err = scriptOf(c.Algorithm).read(c, n); err != nil {
			return false, err
		}
	}
	return status == 1, nil
}
