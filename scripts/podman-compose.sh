#!/usr/bin/env bash
# Prints the path of podman-compose 1.6.0, installing it first from PyPI into .tools/compose-venv (git-ignored)
# when missing, and podman itself (scripts/podman.sh). Progress goes to stderr.
set -euo pipefail
VERSION=1.6.0
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/podman.sh" 2>/dev/null
venv="$root/.tools/compose-venv"
if [[ $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("podman-compose"))' 2>/dev/null) != "$VERSION" ]]; then
	echo "podman-compose.sh: installing podman-compose==$VERSION into .tools/compose-venv" >&2
	python3 -m venv "$venv" >&2
	"$venv/bin/python" -m pip install --disable-pip-version-check -q "podman-compose==$VERSION" >&2
fi
echo "$venv/bin/podman-compose"
