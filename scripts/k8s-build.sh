#!/usr/bin/env bash
# Builds the single-node Kubernetes that scripts/k8s.sh runs, from the Go module
# proxy only, into a cache outside the checkout keyed by version, so that a
# fresh clone on a warm machine reuses it:
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy
#   and kubectl from k8s.io/kubernetes (a wrapper module that replaces each
#   k8s.io staging module with its published v0.x tag, as the monorepo's own
#   go.mod replaces them with ./staging paths), and CoreDNS.
# Prints the directory holding the binaries. Idempotent: a complete directory
# is reused as is.
set -euo pipefail
K8S_VERSION=${K8S_VERSION:-v1.31.0}
COREDNS_VERSION=${COREDNS_VERSION:-v1.11.3}
cache=${RATELIMIT_SIDECAR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ratelimit-sidecar}
out="$cache/k8s-$K8S_VERSION-coredns-$COREDNS_VERSION"
bins=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl coredns)

complete() { for b in "${bins[@]}"; do [[ -x "$out/bin/$b" ]] || return 1; done; }
if complete; then echo "$out/bin"; exit 0; fi

start=$(date +%s)
mkdir -p "$out/src/k8s" "$out/src/coredns" "$out/bin"
staging_minor=${K8S_VERSION#v1.}
staging="v0.$staging_minor"
export GOFLAGS=-mod=mod CGO_ENABLED=0 GOWORK=off

# The staging modules are exactly those k8s.io/kubernetes's go.mod replaces with ./staging paths.
modfile=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^\s*"GoMod": "\(.*\)",$/\1/p')
mapfile -t mods < <(sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$modfile")
(( ${#mods[@]} > 0 )) || { echo "k8s-build.sh: no staging modules in $modfile" >&2; exit 1; }
{
	echo "module localbuild/k8s"
	echo "go 1.22"
	echo "require k8s.io/kubernetes $K8S_VERSION"
	for m in "${mods[@]}"; do echo "replace $m => $m $staging"; done
} >"$out/src/k8s/go.mod"
echo 'package tools' >"$out/src/k8s/tools.go"
for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
	printf '//go:build tools\npackage tools\nimport _ "k8s.io/kubernetes/cmd/%s"\n' "$c" >"$out/src/k8s/$c.go"
done
ver=k8s.io/component-base/version
ldflags="-s -w -X $ver.gitVersion=$K8S_VERSION -X $ver.gitMajor=1 -X $ver.gitMinor=$staging_minor -X $ver.gitTreeState=clean -X $ver.buildDate=1970-01-01T00:00:00Z"
ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$staging_minor"
(
	cd "$out/src/k8s"
	go mod tidy -e >/dev/null 2>&1 || true
	for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
		[[ -x "$out/bin/$c" ]] && continue
		echo "k8s-build.sh: building $c $K8S_VERSION" >&2
		go build -tags tools -trimpath -ldflags "$ldflags" -o "$out/bin/$c.tmp" "k8s.io/kubernetes/cmd/$c"
		mv "$out/bin/$c.tmp" "$out/bin/$c"
	done
)
(
	cd "$out/src/coredns"
	[[ -x "$out/bin/coredns" ]] && exit 0
	echo "k8s-build.sh: building coredns $COREDNS_VERSION" >&2
	[[ -f go.mod ]] || { echo "module localbuild/coredns" >go.mod; echo "go 1.22" >>go.mod; }
	printf '//go:build tools\npackage tools\nimport _ "github.com/coredns/coredns"\n' >tools.go
	go get "github.com/coredns/coredns@$COREDNS_VERSION" >&2
	go build -trimpath -ldflags "-s -w" -o "$out/bin/coredns.tmp" github.com/coredns/coredns
	mv "$out/bin/coredns.tmp" "$out/bin/coredns"
)
complete
echo "k8s-build.sh: built in $(( $(date +%s) - start ))s" >&2
echo "$out/bin"
