#!/bin/sh
# Runs every fault of bench/faults against the sidecar and envoyproxy/ratelimit (each on its own Redis behind
# its own fault proxy, under the same steady load) and writes bench/out-faults/results.json and tables.md.
# Flags pass through to the test binary, e.g. bench/faults.sh -faults.phase 5s -faults.only "blackhole".
set -eu
cd "$(dirname "$0")"
exec go test -count=1 -timeout 60m -run 'TestFaults$' -v ./faults -args -faults.full -faults.out "$(pwd)/out-faults" "$@"
