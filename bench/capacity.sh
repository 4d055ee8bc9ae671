#!/bin/sh
# Remeasures docs/capacity.md's inputs and rewrites its generated tables and its chart (for `make capacity`):
# the harness's per-decision costs, the key space's Redis memory per counter, RLQS next to ShouldRateLimit
# (scenarios a and rlqs), one Redis shard's ceiling, then the model. Run it on a quiet machine: about 13
# minutes. Flags pass through to every harness run, so
#   BENCHTIME=100ms COUNT=1 bench/capacity.sh -duration 2s -warmup 1s -runs 1 -million-keys 20000 -rlqs-duration 20s
# is a smoke run of the whole chain in about two minutes.
set -eu
cd "$(dirname "$0")/.."
out=bench/out-capacity
go run ./bench/harness -scenarios noop,a,s,c,h,cl,ref -runs 3 -duration 4s -warmup 1s -out "$out" "$@"
go run ./bench/harness -scenarios million,million-sliding -runs 1 -duration 40s -warmup 1s -out "$out-million" "$@"
go run ./bench/harness -scenarios a,rlqs -runs 3 -duration 8s -warmup 2s -rlqs-duration 60s -out "$out-rlqs" "$@"
go test ./bench/capacity -run '^$' -bench ShardCeiling -benchtime "${BENCHTIME:-3s}" -count "${COUNT:-3}" | tee "$out/ceiling.txt"
exec go run ./bench/capacity -results "$out/results.json" -key-space "$out-million/results.json" \
  -ceiling "$out/ceiling.txt" -rlqs-results "$out-rlqs/results.json" -chart docs/capacity.png -publish docs/capacity.md
