#!/usr/bin/env bash
# Installs @kubernetes/client-node, at the version pinned by test/tools/js-client/package.json and
# package-lock.json, into DIR/node_modules (DIR is a directory of the build tree, e.g.
# build/js-client) for the e2e test that drives test-apiserver with the JavaScript client
# (test/e2e/client_ecosystems_test.cpp). Needs node (>= 20) and npm. Fast and silent when DIR
# already holds that version from the same lock file; otherwise `npm ci` from the lock file.
# Usage: test/tools/install-js-client.sh DIR
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
src="$(cd "$(dirname "$0")/js-client" && pwd)"
dir="$1"

for tool in node npm; do
  if ! command -v "$tool" >/dev/null; then
    echo "install-js-client: no $tool on PATH" >&2
    exit 1
  fi
done
node_major=$(node -p 'process.versions.node.split(".")[0]')
if ((node_major < 20)); then
  echo "install-js-client: node $(node --version) is too old (@kubernetes/client-node needs 20 or later)" >&2
  exit 1
fi

pinned=$(node -p 'require(process.argv[1]).dependencies["@kubernetes/client-node"]' \
  "$src/package.json")
installed_json="$dir/node_modules/@kubernetes/client-node/package.json"
# The stamp is written last: an interrupted install is never taken for a complete one.
stamp="$dir/.installed-lock"
if [[ -f "$installed_json" && -f "$stamp" ]] && cmp -s "$src/package-lock.json" "$stamp" &&
  [[ "$(node -p 'require(process.argv[1]).version' "$installed_json")" == "$pinned" ]]; then
  exit 0
fi

echo "install-js-client: installing @kubernetes/client-node $pinned into $dir" >&2
mkdir -p "$dir"
rm -f "$stamp"
cp "$src/package.json" "$src/package-lock.json" "$dir/"
timeout 600 npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error --fetch-retries=1 \
  --fetch-timeout=60000 >&2
cp "$src/package-lock.json" "$stamp"
