#!/usr/bin/env bash
# Builds, with podman and no registry, the images deploy/k8s and docker-compose.yml name, for the tests that
# run them for real (test/k8s, test/compose):
#   docker.io/library/ratelimit-sidecar:dev  this repository's sidecar, as the Dockerfile's final stage
#                                            (test/k8s/images/sidecar.Containerfile)
#   docker.io/envoyproxy/envoy:v1.40.0       Envoy from scripts/envoy.sh (PyPI), with the libraries it
#                                            links, bash, cat and sleep (the preStop hook uses them)
#   docker.io/library/redis:7                Debian's redis-server and redis-cli with their libraries, and
#                                            the official image's entrypoint behaviour
#   docker.io/traefik/whoami:v1.10           test/k8s/echo, a stand-in that takes whoami's --port
#   localhost/ratelimit-sidecar-test/pause:1 test/k8s/pause, the test cluster's pod sandbox
# With "save DIR" it also writes each as DIR/NAME.tar (docker-archive) for containerd. Idempotent: podman's
# layer cache makes a rebuild of unchanged inputs quick.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/podman.sh" 2>/dev/null
command -v redis-server >/dev/null || "$root/scripts/deps.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

SIDECAR=docker.io/library/ratelimit-sidecar:dev
ENVOY=docker.io/envoyproxy/envoy:v1.40.0
REDIS=docker.io/library/redis:7
APP=docker.io/traefik/whoami:v1.10
PAUSE=localhost/ratelimit-sidecar-test/pause:1 # scripts/k8s.sh's sandbox image

# addbin DIR DEST BIN: copies BIN to DIR/DEST and every library ldd lists for it to the same path under DIR.
addbin() {
	local dir=$1 dest=$2 bin=$3
	mkdir -p "$dir/$(dirname "$dest")"
	cp -L "$bin" "$dir/$dest"
	ldd "$bin" | grep -o '/[^ ]*' | while read -r lib; do
		[[ -e "$dir$lib" ]] || { mkdir -p "$dir$(dirname "$lib")"; cp -L "$lib" "$dir$lib"; }
	done
}
# users DIR NAME UID: an /etc/passwd and /etc/group with root and one user.
users() {
	mkdir -p "$1/etc" "$1/tmp"
	chmod 1777 "$1/tmp"
	printf 'root:x:0:0:root:/root:/sbin/nologin\n%s:x:%s:%s:%s:/home/%s:/sbin/nologin\n' "$2" "$3" "$3" "$2" "$2" >"$1/etc/passwd"
	printf 'root:x:0:\n%s:x:%s:\n' "$2" "$3" >"$1/etc/group"
}
build() { podman build -q --layers -t "$1" "${@:2}" >/dev/null; }

export GOFLAGS=-mod=readonly GOWORK=off
s=$work/sidecar
mkdir -p "$s/bin"
(cd "$root" && CGO_ENABLED=0 go build -tags vtprotobuf -trimpath -ldflags="-s -w" -o "$s/ratelimit-sidecar" ./cmd/ratelimit-sidecar)
ln -s /ratelimit-sidecar "$s/bin/ratelimit"
users "$s" nonroot 65532
rmdir "$s/tmp"
build "$SIDECAR" -f "$root/test/k8s/images/sidecar.Containerfile" "$s"

e=$work/envoy
addbin "$e" usr/local/bin/envoy "$("$root/scripts/envoy.sh")"
for b in bash cat sleep; do addbin "$e" "bin/$b" "$(command -v $b)"; done
users "$e" envoy 101
build "$ENVOY" -f "$root/test/k8s/images/envoy.Containerfile" "$e"

r=$work/redis
addbin "$r" usr/local/bin/redis-server "$(command -v redis-server)"
addbin "$r" usr/local/bin/redis-cli "$(command -v redis-cli)"
addbin "$r" bin/sh "$(command -v dash)"
cp "$root/test/k8s/images/redis-entrypoint.sh" "$r/usr/local/bin/docker-entrypoint.sh"
users "$r" redis 999
mkdir -p "$r/data" && chown 999:999 "$r/data"
build "$REDIS" -f "$root/test/k8s/images/redis.Containerfile" "$r"

a=$work/app
mkdir -p "$a"
(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$a/whoami" ./test/k8s/echo)
users "$a" nonroot 65532
rmdir "$a/tmp"
build "$APP" -f "$root/test/k8s/images/app.Containerfile" "$a"

p=$work/pause
mkdir -p "$p"
(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$p/pause" ./test/k8s/pause)
build "$PAUSE" -f "$root/test/k8s/images/pause.Containerfile" "$p"

if [[ ${1:-} == save ]]; then
	out=${2:?usage: images.sh [save DIR]}
	mkdir -p "$out"
	for img in "$SIDECAR" "$ENVOY" "$REDIS" "$APP" "$PAUSE"; do
		name=${img##*/}
		name=${name%%:*}
		rm -f "$out/$name.tar"
		podman save -q --format docker-archive -o "$out/$name.tar" "$img"
	done
fi
echo "images.sh: $SIDECAR $ENVOY $REDIS $APP" >&2
