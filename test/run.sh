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
cmake --build "$build_dir" -j "$(nproc)"
cd "$build_dir"
ctest --output-on-failure -j "$(nproc)" "$@"
