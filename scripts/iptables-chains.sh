#!/usr/bin/env bash
# Puts the host's iptables chains back as they were around a command that adds its own, such as podman's CNI
# plugins (CNI-HOSTPORT-*, CNI-FORWARD, CNI-ADMIN, which podman never removes):
#   scripts/iptables-chains.sh run CMD...   snapshot the chains, run CMD, delete every chain CMD added and
#                                           each rule that jumps to one; exit with CMD's status
set -euo pipefail
chains() { iptables-save 2>/dev/null | awk '/^\*/ { t = substr($0, 2) } /^:/ { print t, substr($1, 2) }' | sort; }
[[ ${1:-} == run ]] || { echo "usage: iptables-chains.sh run CMD..." >&2; exit 2; }
shift
before=$(chains)
rc=0
"$@" || rc=$?
added=$(comm -13 <(echo "$before") <(chains))
# First every rule that jumps to an added chain, then the chains (one may jump to another).
while read -r table chain; do
	[[ -n $chain ]] || continue
	{ iptables-save -t "$table" | grep -E -- "^-A .*-j $chain( |\$)" || true; } | sed 's/^-A /-D /' | while read -r rule; do
		eval "iptables -t $table $rule" || true
	done
done <<<"$added"
while read -r table chain; do
	[[ -n $chain ]] || continue
	iptables -t "$table" -F "$chain"
done <<<"$added"
while read -r table chain; do
	[[ -n $chain ]] || continue
	iptables -t "$table" -X "$chain"
	echo "iptables-chains.sh: removed $table/$chain" >&2
done <<<"$added"
exit "$rc"
