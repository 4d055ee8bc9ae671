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
// arithmetic: an Assign is two round trips, an HGETALL of the bucket and a
// compare-and-set script (commit.lua) that writes the client's new state
// and drops the expired clients only if the version is the one read, else
// answers the current hash so the next try needs no read. The invariant of
// the division therefore holds across replicas exactly as in one process:
// every grant is computed from the state it replaces. Both calls may be
// sent again safely (a read; a version-checked write, which a second time
// finds the version moved and re-divides on the state it wrote).
package redisledger
