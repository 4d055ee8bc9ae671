package redisstore

import (
	"fmt"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/window"
)

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
