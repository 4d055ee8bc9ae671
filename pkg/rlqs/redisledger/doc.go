// Package redisledger is an rlqs.Ledger kept in Redis, so every replica
// that uses the same Redis and key prefix divides one budget per bucket: a
// single node, a Sentinel-managed master or Redis Cluster, through a
// go-redis client.
//
// A bucket's whole state is one hash, Prefix + key, so one hash slot: a
// field "v" holding a version, one field "c:<client>" per client holding
// its rlqs.ClientState (see state.go), and the commit script's bound "u". The hash expires when the
// last client's share would (PEXPIRE), so a bucket no Envoy reports any
// more leaves nothing behind; Redis's clock only runs that expiry, the
// ledger's decisions use the now it is given (the replicas' agreed clock,
// as the window store's).
//
// The policy stays in Go (rlqs.Policy.Divide); the invariant is also kept
// in Redis. A Ledger keeps the state of each bucket as of its last write or
// read and divides on it; the commit script (commit.lua) writes the
// client's new state. When the bucket is still at the version divided on,
// the division saw exactly the state it replaces and is written as is
// (O(1) in Redis). When another replica wrote the bucket meanwhile, the
// script answers the current hash and the Ledger divides again, up to
// Options.Tries writes; the last is capped in Redis and always written: a
// grant that is no raise as is, a raise within the bucket's bound (field
// "u", at least the clients' counted sums) as is, else what the bound
// leaves, or, at most once per scanGap, what a scan of the clients
// (O(clients)) finds the others leave. So Σ counted ≤ the fleet's rate
// holds across replicas however many write at once, and contention never
// fails an Assign. An Assign serves all of a report's buckets together:
// one pipeline writes them all, when no other replica wrote them since
// (one round trip however many buckets); one pipeline before it reads the
// buckets not cached, and one more rereads and writes again those another
// replica wrote (Options.Tries). Versions are random and never reused, so a hash
// that expired and was created again cannot pass for one seen before. A
// call that fails may or may not have written; the Ledger then forgets the
// bucket and reads it again next time.
package redisledger
