package window

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrBadPrefix reports a key prefix that would break the key layout.
var ErrBadPrefix = errors.New("window: bad key prefix")

// CheckPrefix reports whether prefix can start counter keys: it must not hold
// '{' or '}', which would move the Redis Cluster hash tag.
func CheckPrefix(prefix string) error {
	if strings.ContainsAny(prefix, "{}") {
		return fmt.Errorf("%w: %q holds '{' or '}'", ErrBadPrefix, prefix)
	}
	return nil
}

// AppendKeyHead appends to dst the start of the identity of a descriptor's
// counters; AppendKeyEntry, AppendKeyQualifier, AppendKeyEnd and
// AppendKeyCounter complete it: head, then each entry in request order, then
// at most one qualifier, then the end, then the limit's counter. The whole
// key is
//
//	<prefix>:{<domain>|<key1>=<value1>|<key2>=<value2>...[|!<qualifier>]}[!<counter>]
//
// Stores complete it with ":<window size ms>:<window start ms>" (see
// AppendWindow), or for TokenBucket and SlidingLog, whose state is not per
// window, with ":<window size ms>" only (see Counter.AppendStoreKey). The
// braces are a Redis Cluster hash tag, so every window and every limit's
// counter of one descriptor lands on one slot. Parts are copied
// verbatim except the bytes % { } | = : and control bytes, which become %XX,
// so the encoding is injective: two different (domain, entries, qualifier,
// counter) never share a key, and an operator still finds "alice" with
// redis-cli --scan --pattern '*alice*'. A qualifier (for example "override")
// keys the same descriptor separately; it is empty for configured limits.
// prefix must pass CheckPrefix.
func AppendKeyHead(dst []byte, prefix, domain string) []byte {
	dst = append(dst, prefix...)
	dst = append(dst, ":{"...)
	return appendEscaped(dst, domain)
}

// AppendKeyEntry appends one descriptor entry; see AppendKeyHead.
func AppendKeyEntry(dst []byte, key, value string) []byte {
	dst = append(dst, '|')
	dst = appendEscaped(dst, key)
	dst = append(dst, '=')
	return appendEscaped(dst, value)
}

// AppendKeyQualifier appends a qualifier; see AppendKeyHead. Entries always
// hold an unescaped '=', so a part without one cannot be mistaken for an
// entry.
func AppendKeyQualifier(dst []byte, qualifier string) []byte {
	dst = append(dst, "|!"...)
	return appendEscaped(dst, qualifier)
}

// AppendKeyEnd closes the hash tag; see AppendKeyHead.
func AppendKeyEnd(dst []byte) []byte { return append(dst, '}') }

// AppendKeyCounter appends, after AppendKeyEnd, what keys the counter of one
// limit of a descriptor apart from the descriptor's other limits: the
// limit's index (from 0) in the descriptor's list of limits, and its
// algorithm, so two limits never share a counter, whatever their lengths
// and algorithms. It appends nothing for the first limit when it counts with
// FixedWindow, so the key of a descriptor with one fixed-window limit is the
// descriptor's alone; else '!', then the index when it is not 0 and the
// algorithm (Algorithm.String) when it is not FixedWindow, joined by ',':
// "!1", "!sliding_window", "!1,sliding_window". It sits after the hash tag,
// so all counters of a descriptor share a slot. index must be >= 0.
func AppendKeyCounter(dst []byte, index int, a Algorithm) []byte {
	name := a.alg().keyName()
	if index == 0 && name == "" {
		return dst
	}
	dst = append(dst, '!')
	if index != 0 {
		dst = strconv.AppendInt(dst, int64(index), 10)
		if name == "" {
			return dst
		}
		dst = append(dst, ',')
	}
	return append(dst, name...)
}

// AppendWindow appends ":<size ms>:<start ms>" to a key from AppendKeyEnd
// and AppendKeyCounter. The size is part of the key so that a rule whose
// window changed on reload never shares a counter with its old window.
func AppendWindow(key []byte, w Window) []byte {
	key = append(key, ':')
	key = strconv.AppendInt(key, w.Size, 10)
	key = append(key, ':')
	return strconv.AppendInt(key, w.Start, 10)
}

// AppendStoreKey appends to dst the key under which a store keeps r's
// state at nowMs: r.Key, then for FixedWindow and SlidingWindow the current
// window (AppendWindow), for TokenBucket and SlidingLog ":<size ms>" only.
//
// For a Reference counter it appends the window's start in Unix seconds, as
// envoyproxy/ratelimit does.
func (r *Counter) AppendStoreKey(dst []byte, nowMs int64) []byte {
	dst = append(dst, r.Key...)
	size := r.Size.Milliseconds()
	if r.Reference {
		return strconv.AppendInt(dst, AtMillis(nowMs, size).Start/1000, 10)
	}
	if r.Algorithm.Windowed() {
		return AppendWindow(dst, AtMillis(nowMs, size))
	}
	dst = append(dst, ':')
	return strconv.AppendInt(dst, size, 10)
}

// AppendReferenceKey appends to dst the head of a counter key in
// envoyproxy/ratelimit's layout (its src/limiter/cache_key.go, unchanged
// from 3fb7025 to f2fb157): prefix (its CACHE_KEY_PREFIX) and domain
// verbatim, then '_'. AppendReferenceEntry appends each entry, and a store
// the window's start in Unix seconds (Counter.Reference):
//
//	<prefix><domain>_<key1>_<value1>_<key2>_<value2>_<window start s>
//
// Nothing is escaped, so, unlike AppendKeyHead's, these keys are not
// injective: (a_b=c) and (a=b_c) share a counter, as they do in
// envoyproxy/ratelimit. It is for migrations, where sharing its counters
// is the point. The key holds no hash tag unless a part has braces.
func AppendReferenceKey(dst []byte, prefix, domain string) []byte {
	dst = append(dst, prefix...)
	dst = append(dst, domain...)
	return append(dst, '_')
}

// AppendReferenceEntry appends one descriptor entry, "<key>_<value>_"; see
// AppendReferenceKey.
func AppendReferenceEntry(dst []byte, key, value string) []byte {
	dst = append(dst, key...)
	dst = append(dst, '_')
	dst = append(dst, value...)
	return append(dst, '_')
}

const hexDigits = "0123456789ABCDEF"

func needsEscape(c byte) bool {
	switch c {
	case '%', '{', '}', '|', '=', ':':
		return true
	}
	return c < 0x20 || c == 0x7f
}

func appendEscaped(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsEscape(c) {
			dst = append(dst, '%', hexDigits[c>>4], hexDigits[c&15])
			continue
		}
		dst = append(dst, c)
	}
	return dst
}
