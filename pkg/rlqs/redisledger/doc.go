// Package redisledger is an rlqs.Ledger kept in Redis, so every replica
// that uses the same Redis and key prefix divides one budget per bucket: a
// single node, a Sentinel-managed master or Redis Cluster, through a
// go-redis client.
//
// A bucket's whole state is one hash, Prefix + key, so one hash slot: a
// field "v" holding a version, and one field "c:<client>" per client
// holding its rlqs.ClientState (see state.go). The hash expires when the
// last client's share would (PEXPIRE), so a bucket no Envoy reports any
// more leaves nothing behind; Redis's clock only runs that expiry, the
// ledger's decisions use the now it is given (the replicas' agreed clock,
// as the window store's).
//
// The policy stays in Go (rlqs.Policy.Divide); the invariant is also kept
// in Redis. A Ledger keeps the state of each bucket as of its last write or
// read and divides on it; the commit script (commit.lua) always writes the
// client's new state. When the bucket is still at the version divided on,
// the division saw exactly the state it replaces and is written as is
// (O(1) in Redis), dropping the expired clients. When another replica
// wrote the bucket meanwhile, the script sums what the other unexpired
// clients count at the caller's now and grants min(the division's grant,
// what they leave of the fleet's rate and burst), O(clients) in Redis: Σ
// counted ≤ the fleet's rate holds across replicas however many write at
// once, and contention never fails an Assign. The division itself then saw
// a stale state, which costs fairness only; so the first write from a
// cache older than Options.Refresh (1 s) asks instead for the hash on
// another version, and the Ledger divides again on it. An Assign is one
// round trip when no other replica wrote the bucket since, or when its
// cache is younger than the refresh; two (a reread) otherwise; three the
// first time a bucket is seen. Versions are random and never reused, so a
// hash that expired and was created again cannot pass for one seen
// before. A call that fails may or may not have written; the Ledger then
// forgets the bucket and reads it again next time.
package redisledger
