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
// The policy stays in Go (rlqs.Policy.Divide), so Redis runs no
// arithmetic. A Ledger keeps the state of each bucket as of its last write
// or read and divides on it; a compare-and-set script (commit.lua) writes
// the client's new state and drops the expired clients only if the bucket
// is still at the version divided on, else answers the current hash, on
// which the Ledger divides again. So an Assign is one round trip when no
// other replica wrote the bucket since this one last did, two when one did
// (three the first time a bucket is seen: a read, a write). Every grant is
// computed from exactly the state it replaces, so the invariant of the
// division holds across replicas as in one process. Versions are random
// and never reused, so a hash that expired and was created again cannot
// pass for one seen before. A call that fails may or may not have written;
// the Ledger then forgets the bucket and reads it again next time.
package redisledger
