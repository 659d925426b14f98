#!/usr/bin/env bash
# Installs the Debian packages nodeagent needs to build and test, only when some are missing.
# Fast and silent when everything is present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache
  libboost-dev libcpp-httplib-dev libyaml-cpp-dev libyaml-dev libspdlog-dev catch2 nlohmann-json3-dev
  libssl-dev zlib1g-dev libbrotli-dev libbenchmark-dev
  openssl python3 python3-kubernetes procps
)
if [[ "${NODEAGENT_WITH_BENCH_PEERS:-}" == 1 ]]; then
  packages+=(supervisor)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
sudo_cmd=()
[[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq >/dev/null
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
