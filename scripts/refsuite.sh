#!/usr/bin/env bash
# Runs envoyproxy/ratelimit's own integration suite against the sidecar.
#
#   scripts/refsuite.sh DIR [SCRIPT...]
#
# DIR is a checkout (or `git archive`) of envoyproxy/ratelimit. Its
# integration-test/scripts/*.sh are run, in the order of its run-all.sh,
# against what its integration-test/docker-compose-integration-test.yml
# starts, on loopback instead of a compose network:
#   - the sidecar, built from this checkout and started as /bin/ratelimit is
#     there, with that service's environment, its rules directory
#     (examples/ratelimit/config) under RUNTIME_ROOT/RUNTIME_SUBDIRECTORY;
#   - a redis-server;
#   - Envoy 1.40 (scripts/envoy.sh) twice: examples/envoy/proxy.yaml as
#     envoy-proxy and examples/envoy/mock.yaml as envoy-mock.
# Nothing of DIR is copied into this repository: its configs are rewritten at
# run time into a temporary directory, their hostnames and fixed ports
# replaced by 127.0.0.1 and free ports, and each passes `envoy --mode
# validate`. The scripts run unchanged: a `curl` put first on their PATH
# sends envoy-proxy:8888 to the proxy and statsd:9102 (the compose file's
# statsd exporter) to the sidecar's /metrics, which serves the reference's
# metric names.
#
# SCRIPT names limit the run to those scripts (e.g. token-quota.sh).
#
# The scripts share counters: quota.sh's last request and token-quota.sh
# both count on (service: service_2), so when they fall in one minute
# token-quota.sh starts with a count of 1, whichever server runs. With
# REFSUITE_ISOLATE=1 each script starts in a minute of its own, so none
# sees another's counts (up to a minute more per script).
#
# RATELIMIT_BIN=path runs that binary as /bin/ratelimit instead of the
# sidecar: envoyproxy/ratelimit's own build, for a baseline. Its statsd
# then goes to 127.0.0.1 (nothing listens), so that nothing leaves loopback;
# the metrics script fails for it.
#
# It prints one line per script, PASS or FAIL with the script's output, and
# exits 1 if any failed. It is not part of CI: the scripts sleep a minute
# each for their windows to turn, about four minutes in all.
set -euo pipefail

if [[ $# -lt 1 || ! -d $1/integration-test/scripts ]]; then
	echo "usage: $0 DIR [SCRIPT...]  (DIR: an envoyproxy/ratelimit checkout with integration-test/scripts)" >&2
	exit 2
fi
src=$(cd "$1" && pwd)
shift
only=("$@")
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
envoy=$("$root/scripts/envoy.sh")
realcurl=$(command -v curl)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/refsuite.XXXXXX")
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

# freeport prints a loopback TCP port that was free a moment ago.
freeport() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
redis_port=$(freeport) http_port=$(freeport) grpc_port=$(freeport) debug_port=$(freeport)
proxy_port=$(freeport) proxy_admin=$(freeport) mock1_port=$(freeport) mock2_port=$(freeport) mock_admin=$(freeport)

mkdir -p "$tmp/bin"
if [[ -n ${RATELIMIT_BIN:-} ]]; then
	echo "refsuite: running $RATELIMIT_BIN as ratelimit" >&2
	cp "$RATELIMIT_BIN" "$tmp/bin/ratelimit"
else
	echo "refsuite: building the sidecar as ratelimit" >&2
	(cd "$root" && go build -tags vtprotobuf -o "$tmp/bin/ratelimit" ./cmd/ratelimit-sidecar)
fi

# The configs, with the compose network's names and ports replaced.
mkdir -p "$tmp/data/ratelimit"
cp -R "$src/examples/ratelimit/config" "$tmp/data/ratelimit/config"
perl -0pe "
	s/(address:\s*)ratelimit(\s+port_value:\s*)8081/\${1}127.0.0.1\${2}$grpc_port/g;
	s/(address:\s*)envoy-mock(\s+port_value:\s*)9999/\${1}127.0.0.1\${2}$mock1_port/g;
	s/(address:\s*)envoy-mock(\s+port_value:\s*)10001/\${1}127.0.0.1\${2}$mock2_port/g;
	s/(address:\s*)0\.0\.0\.0(\s+port_value:\s*)8888/\${1}127.0.0.1\${2}$proxy_port/g;
	s/(address:\s*)0\.0\.0\.0(\s+port_value:\s*)8001/\${1}127.0.0.1\${2}$proxy_admin/g;
" "$src/examples/envoy/proxy.yaml" >"$tmp/proxy.yaml"
perl -0pe "
	s/(address:\s*)0\.0\.0\.0(\s+port_value:\s*)9999/\${1}127.0.0.1\${2}$mock1_port/g;
	s/(address:\s*)0\.0\.0\.0(\s+port_value:\s*)10001/\${1}127.0.0.1\${2}$mock2_port/g;
	s/(address:\s*)0\.0\.0\.0(\s+port_value:\s*)8001/\${1}127.0.0.1\${2}$mock_admin/g;
" "$src/examples/envoy/mock.yaml" >"$tmp/mock.yaml"
for f in proxy mock; do
	if grep -nE 'address: *(0\.0\.0\.0|ratelimit|envoy-mock)$' "$tmp/$f.yaml" >&2; then
		echo "refsuite: $f.yaml: an address above was not rewritten to loopback" >&2
		exit 1
	fi
	"$envoy" --mode validate -c "$tmp/$f.yaml" --service-node "$f" --service-cluster "$f" >"$tmp/$f.validate" 2>&1 ||
		{ cat "$tmp/$f.validate" >&2; exit 1; }
done

redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no >"$tmp/redis.log" 2>&1 &
pids+=($!)

# The environment of the compose file's ratelimit service; only the
# addresses differ (loopback, free ports).
statsd_host=statsd
[[ -z ${RATELIMIT_BIN:-} ]] || statsd_host=127.0.0.1
(
	cd "$tmp"
	exec env -i PATH="$PATH" HOME="$tmp" \
		USE_STATSD=true STATSD_HOST="$statsd_host" STATSD_PORT=9125 LOG_LEVEL=debug \
		REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$redis_port" \
		RUNTIME_ROOT="$tmp/data" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
		RESPONSE_DYNAMIC_METADATA=true \
		HOST=127.0.0.1 PORT="$http_port" GRPC_HOST=127.0.0.1 GRPC_PORT="$grpc_port" \
		DEBUG_HOST=127.0.0.1 DEBUG_PORT="$debug_port" \
		"$tmp/bin/ratelimit"
) >"$tmp/ratelimit.log" 2>&1 &
pids+=($!)
"$envoy" -c "$tmp/mock.yaml" --service-node mock --service-cluster mock --concurrency 1 --mode serve \
	--log-level warn --base-id-path "$tmp/mock.base-id" --use-dynamic-base-id >"$tmp/mock.log" 2>&1 &
pids+=($!)
"$envoy" -c "$tmp/proxy.yaml" --service-node proxy --service-cluster proxy --concurrency 1 --mode serve \
	--log-level warn --base-id-path "$tmp/proxy.base-id" --use-dynamic-base-id >"$tmp/proxy.log" 2>&1 &
pids+=($!)

# wait_http URL: until it answers 200, at most 30 s.
wait_http() {
	for _ in $(seq 300); do
		[[ $("$realcurl" -s -o /dev/null -w '%{http_code}' "$1" || true) == 200 ]] && return 0
		sleep 0.1
	done
	echo "refsuite: $1 never answered 200" >&2
	for f in ratelimit proxy mock redis; do echo "--- $f" >&2; tail -20 "$tmp/$f.log" >&2; done
	exit 1
}
wait_http "http://127.0.0.1:$http_port/healthcheck"
wait_http "http://127.0.0.1:$mock_admin/ready"
wait_http "http://127.0.0.1:$proxy_admin/ready"

# The scripts' curl, with the compose network's names mapped to loopback.
cat >"$tmp/bin/curl" <<EOF
#!/bin/sh
exec "$realcurl" --connect-to envoy-proxy:8888:127.0.0.1:$proxy_port --connect-to statsd:9102:127.0.0.1:$http_port "\$@"
EOF
chmod +x "$tmp/bin/curl"

# failopen prints how many rate limit calls the proxy let through because the
# service did not answer in time (its 20 ms default timeout) or failed.
failopen() {
	"$realcurl" -s "http://127.0.0.1:$proxy_admin/stats?filter=ratelimit%5C.%28error%7Cfailure_mode_allowed%29" |
		awk -F': ' '{n += $2} END {print n + 0}'
}

failed=0
for f in "$src"/integration-test/scripts/*; do
	name=$(basename "$f")
	if ((${#only[@]} > 0)) && [[ " ${only[*]} " != *" $name "* ]]; then
		continue
	fi
	if [[ ${REFSUITE_ISOLATE:-} == 1 ]]; then
		sleep $((60 - $(date +%s) % 60)).1
	fi
	start=$(date +%s) open=$(failopen)
	if PATH="$tmp/bin:$PATH" bash "$f" >"$tmp/out" 2>&1; then
		echo "PASS $name ($(($(date +%s) - start))s)"
	else
		echo "FAIL $name ($(($(date +%s) - start))s; rate limit calls failed open meanwhile: $(($(failopen) - open)))"
		sed 's/^/    /' "$tmp/out"
		failed=1
	fi
done
if ((failed)); then
	echo "--- ratelimit log (last 40 lines)"
	tail -40 "$tmp/ratelimit.log"
fi
exit "$failed"
