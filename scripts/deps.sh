#!/usr/bin/env bash
# Installs what the tests need when it is missing, so `make test` works on a
# fresh Debian machine: redis-server, redis-sentinel and redis-cli from
# Debian's packages, and Envoy 1.40.0 into the project-local .tools/ (see
# scripts/envoy.sh). Idempotent and quick when everything is there.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

missing=()
for bin in redis-server redis-sentinel redis-cli; do
	command -v "$bin" >/dev/null 2>&1 || missing+=("$bin")
done
if ((${#missing[@]} > 0)); then
	echo "deps.sh: installing redis-server redis-sentinel redis-tools (missing: ${missing[*]})" >&2
	sudo=""
	[[ $(id -u) -eq 0 ]] || sudo="sudo"
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get update -qq >&2
	$sudo apt-get install -y -qq redis-server redis-sentinel redis-tools >&2
	# The Debian package starts a system-wide redis on :6379; the tests never use it.
fi

envoy=$("$root/scripts/envoy.sh")
echo "deps.sh: $(redis-server --version | cut -d' ' -f1-3), envoy $("$envoy" --version 2>&1 | grep -o '1\.[0-9]*\.[0-9]*' | head -1)" >&2
