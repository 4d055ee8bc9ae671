package redisstore

import (
	"bytes"
	"hash/maphash"
)

// sharedKeys finds the keys that several counters of a call use, a hot
// tenant's under load. The script reads such a key once, decides its
// requests in Lua and writes it once (see take.lua), where a key of one
// counter is counted first and undone on denial. The call lists the shared
// keys first among its KEYS and their planned hits (the hits of their
// counting counters, which the script's read adds, betting they are all
// admitted) after the triples. The zero value holds none; it is not safe
// for concurrent use.
//
// Sharing is an optimisation only: a key used twice that is not listed is
// decided exactly too, one command per use, so a key is left out whenever
// it cannot be listed exactly (see off and collided).
type sharedKeys struct {
	list []sharedKey
	// index finds a key's entry by its hash once there are more than
	// sharedScanned; kept, cleared, from call to call, like triples.index.
	index map[uint64]int
	// collided is set when two distinct keys of the call share a hash:
	// then no key is shared, which is exact whatever index found.
	collided bool
	count    int // the keys listed, set by insertKeys
}

// sharedScanned is how many keys add finds by scanning the list.
const sharedScanned = 8

// maxPlanned bounds a key's planned hits: the script adds them up in Lua's
// numbers, exact below 2^53.
const maxPlanned = 1 << 52

var sharedSeed = maphash.MakeSeed()

type sharedKey struct {
	at      int // the index in the call's arguments of the key's first use
	planned uint64
	uses    int
	off     bool // its planned hits would pass maxPlanned: not shared
}

// add records a use of key, args[at], that plans hits.
func (sk *sharedKeys) add(args []any, key []byte, at int, hits uint64) {
	e := sk.find(args, key)
	if e == nil {
		sk.list = append(sk.list, sharedKey{at: at})
		if len(sk.list) > sharedScanned {
			sk.index[maphash.Bytes(sharedSeed, key)] = len(sk.list) - 1
		}
		e = &sk.list[len(sk.list)-1]
	}
	e.uses++
	if hits > maxPlanned-e.planned {
		e.off = true
	} else {
		e.planned += hits
	}
}

// find returns the entry of key, or nil when it has none yet. Past
// sharedScanned entries it builds the index.
func (sk *sharedKeys) find(args []any, key []byte) *sharedKey {
	if len(sk.list) <= sharedScanned {
		for i := range sk.list {
			if bytes.Equal(keyOf(args[sk.list[i].at]), key) {
				return &sk.list[i]
			}
		}
		if len(sk.list) < sharedScanned {
			return nil
		}
		if sk.index == nil {
			sk.index = make(map[uint64]int)
		}
		for i := range sk.list {
			h := maphash.Bytes(sharedSeed, keyOf(args[sk.list[i].at]))
			if _, ok := sk.index[h]; ok {
				sk.collided = true
			}
			sk.index[h] = i
		}
	}
	i, ok := sk.index[maphash.Bytes(sharedSeed, key)]
	if !ok {
		return nil
	}
	if !bytes.Equal(keyOf(args[sk.list[i].at]), key) {
		sk.collided = true
		return nil
	}
	return &sk.list[i]
}

// listed reports whether e goes in the call as a shared key.
func (sk *sharedKeys) listed(e *sharedKey) bool {
	return !sk.collided && e.uses > 1 && !e.off
}

// insertKeys inserts the shared keys at args[at:], before the requests'
// keys that follow there, and returns args.
func (sk *sharedKeys) insertKeys(args []any, at int) []any {
	sk.count = 0
	for i := range sk.list {
		if sk.listed(&sk.list[i]) {
			sk.count++
		}
	}
	if sk.count == 0 {
		return args
	}
	n := len(args)
	for range sk.count {
		args = append(args, nil)
	}
	copy(args[at+sk.count:], args[at:n])
	j := at
	for i := range sk.list {
		if e := &sk.list[i]; sk.listed(e) {
			args[j] = args[e.at+sk.count]
			j++
		}
	}
	return args
}

// appendPlanned ends a call: it appends the shared keys' planned hits to
// dst, in the order of insertKeys, and empties sk for the next call.
func (sk *sharedKeys) appendPlanned(dst []any) []any {
	if sk.count > 0 {
		for i := range sk.list {
			if e := &sk.list[i]; sk.listed(e) {
				dst = append(dst, e.planned)
			}
		}
	}
	if len(sk.list) > sharedScanned {
		clear(sk.index)
	}
	sk.list, sk.count, sk.collided = sk.list[:0], 0, false
	return dst
}
