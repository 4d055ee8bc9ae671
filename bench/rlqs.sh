#!/bin/sh
# Measures RLQS next to ShouldRateLimit (for `make rlqs-bench`; docs/benchmarks.md, "RLQS"): one harness run of
# scenarios a and rlqs, alternating, then the capacity model's RLQS part from it (sidecar cores and Redis shards
# at 1M requests/s, requests governed per core). About 5 minutes. Flags pass through to the harness, e.g.
#   bench/rlqs.sh -runs 1 -duration 2s -rlqs-duration 20s -rlqs-streams 20     # a smoke run, about a minute
# PUBLISH=1 also rewrites docs/capacity.md's RLQS part (the rest of the page is left as it is).
set -eu
cd "$(dirname "$0")/.."
out=bench/out-rlqs
go run ./bench/harness -scenarios a,rlqs -runs 3 -duration 8s -warmup 2s -rlqs-duration 60s -out "$out" "$@"
if [ -n "${PUBLISH:-}" ]; then
  exec go run ./bench/capacity -rlqs-results "$out/results.json" -publish docs/capacity.md
fi
exec go run ./bench/capacity -rlqs-results "$out/results.json"
