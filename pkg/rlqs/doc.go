// Package rlqs serves Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3.RateLimitQuotaService): Envoy decides
// each request at the edge against a token bucket this server assigns, and
// reports every few seconds what it allowed and denied. The server matches
// each reported bucket to a rule of the same rules ShouldRateLimit serves,
// charges the reported admissions to that rule's counter, and divides the
// rule's rate among the clients that report the bucket, in proportion to
// their demand, so that the whole fleet keeps one limit.
//
// The files:
//   - ledger.go: the contract of the shared state (Ledger, Report, Share),
//     kept in Redis or in memory, so every replica divides one budget;
//   - share.go: how a rule's rate is divided (the policy, in one place);
//   - memory.go: the ledger of a single replica; redisledger: the one in
//     Redis that all replicas share;
//   - strategy.go: a Share as the token bucket Envoy 1.40 applies;
//   - server.go, stream.go: the gRPC stream, its caps and bad input.
//
// docs/rlqs.md states the guarantee and derives it.
package rlqs
