#!/usr/bin/env bash
# Installs podman from Debian's packages when missing and configures it for the machines this project is
# built on (root, no CAP_SYS_RESOURCE, cgroups v1 with a v2 mount, no systemd). Idempotent.
#   - runc, not crun: crun refuses hybrid cgroups ("cgroups in hybrid mode not supported");
#   - cgroupfs: there is no systemd to manage cgroups;
#   - explicit nofile/nproc ulimits: the default raises RLIMIT_NOFILE above what this machine may set
#     ("setrlimit RLIMIT_NOFILE: Operation not permitted").
set -euo pipefail
conf=/etc/containers/containers.conf
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"

pkgs=(podman runc conmon fuse-overlayfs slirp4netns uidmap containernetworking-plugins
	golang-github-containernetworking-plugin-dnsname dnsmasq-base iptables)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]} > 0)); then
	echo "podman.sh: installing ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get update -qq >&2
	$sudo apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >&2
fi

if ! grep -qs '^# ratelimit-sidecar scripts/podman.sh' "$conf"; then
	[[ -f "$conf" ]] && $sudo cp "$conf" "$conf.before-ratelimit-sidecar"
	$sudo mkdir -p /etc/containers
	$sudo tee "$conf" >/dev/null <<'CONF'
# ratelimit-sidecar scripts/podman.sh: podman on a root machine without systemd or CAP_SYS_RESOURCE.
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
fi
podman --version >&2
