#!/usr/bin/env bash
# Installs what is missing, configures, builds and runs every test through ctest.
# Usage: ./test/run.sh [extra ctest args]   (BUILD_DIR, BUILD_TYPE and NODEAGENT_SANITIZE are honoured)
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/install-deps.sh
build_dir="${BUILD_DIR:-build}"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  -DNODEAGENT_SANITIZE="${NODEAGENT_SANITIZE:-OFF}" -DNODEAGENT_WERROR=ON "${launcher[@]}" >/dev/null
# @kubernetes/client-node for the client ecosystems e2e test, into the build tree. Without it
# (no node or npm, no registry) the run goes on and that test says SKIPPED with the reason.
if ! ./test/tools/install-js-client.sh "$build_dir/js-client"; then
  echo "run.sh: could not install @kubernetes/client-node into $build_dir/js-client;" \
    "the JavaScript client e2e test will be SKIPPED" >&2
fi
cmake --build "$build_dir" -j "$(nproc)"
cd "$build_dir"
ctest --output-on-failure -j "$(nproc)" "$@"
