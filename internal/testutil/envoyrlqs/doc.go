// Package envoyrlqs models, for tests and the benchmark harness, how Envoy
// 1.40's rate_limit_quota filter applies an RLQS server's assignments to one
// bucket: which requests it admits, and what it reports.
//
// The model follows Envoy 1.40's source (source/extensions/filters/http/
// rate_limit_quota: global_client_impl.cc, filter.cc, quota_bucket_cache.h;
// source/common/common/token_bucket_impl.cc), including its quirks, because
// a server must be designed for what Envoy does rather than what the proto
// says:
//   - a token_bucket's rate is tokens_per_fill divided by fill_interval in
//     whole seconds (truncated), so a sub-second fill_interval divides by
//     zero and admits every request;
//   - a token_bucket is "unchanged" when max_tokens, tokens_per_fill and only
//     the nanos of fill_interval are equal: such an assignment keeps the
//     running bucket and only restarts the TTL (Envoy PR #36478);
//   - a replacing token bucket starts with the old bucket's fill ratio
//     (floor(max_tokens × remaining/old max); Envoy PR #37624, in releases
//     since 1.33), a new one starts full;
//   - the bucket refills continuously (Envoy's AtomicTokenBucketImpl, in
//     float64 seconds), never by whole fills;
//   - only the whole seconds of assignment_time_to_live count; at its end
//     the expired_assignment_behavior's fallback_rate_limit applies for
//     expired_assignment_behavior_timeout, then no_assignment_behavior
//     (reuse_last_assignment has no fallback_rate_limit, so 1.40 goes to
//     no_assignment_behavior at once);
//   - the first request of a bucket is decided by no_assignment_behavior
//     (only a blanket DENY_ALL denies it) and sends an immediate report
//     whose time_elapsed is 0;
//   - time_elapsed is truncated to whole seconds and the counts reset at
//     every report, sent or not;
//   - abandon_action removes the bucket: its next request starts over.
//
// Time is a parameter of every method; nothing here reads a clock.
package envoyrlqs
