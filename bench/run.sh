#!/bin/sh
# Runs the benchmark harness from the repository root (for `make bench`); flags pass through,
# e.g. bench/run.sh -duration 5s -runs 1, or bench/run.sh -publish.
set -eu
cd "$(dirname "$0")/.."
exec go run ./bench/harness "$@"
