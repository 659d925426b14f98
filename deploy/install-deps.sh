#!/usr/bin/env bash
# Installs the Debian packages nodeagent needs to build and test, only when some are missing.
# Fast and silent when everything is present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache
  libboost-dev libcpp-httplib-dev libyaml-cpp-dev libyaml-dev libspdlog-dev catch2 nlohmann-json3-dev
  libssl-dev zlib1g-dev libbrotli-dev libbenchmark-dev
  # The daemon's allocator (see CMakeLists.txt, NODEAGENT_JEMALLOC).
  libjemalloc-dev
  openssl python3 python3-kubernetes procps tmux curl
  # The CRI runtime (agent/runtime/cri/): gRPC/protobuf to build its client, and containerd with
  # runc for the tests, which start a containerd of their own (never the system one).
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc containerd runc
  # Pod networking in those tests: the CNI plugins (bridge, host-local, loopback in /usr/lib/cni)
  # and `ip` to remove the test's bridge.
  containernetworking-plugins iproute2
  # The CRI tests' images are built from busybox (test/images/make-test-images.sh).
  busybox-static
)
# Node.js 20+ and npm for @kubernetes/client-node in the e2e tests (test/tools/
# install-js-client.sh): Debian's packages only when no node or npm is on the PATH already
# (NodeSource's nodejs, say, brings its own npm and conflicts with Debian's).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi
if [[ "${NODEAGENT_WITH_BENCH_PEERS:-}" == 1 ]]; then
  packages+=(supervisor)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# promtool (tests check /metrics with it): only the binary, taken from Debian's prometheus
# package without installing the package (which would set up a Prometheus server).
install_promtool() {
  command -v promtool >/dev/null && return 0
  local tmp
  tmp=$(mktemp -d)
  if (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1 &&
      dpkg-deb --fsys-tarfile prometheus_*.deb | tar -x ./usr/bin/promtool); then
    local sudo_cmd=()
    [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
    "${sudo_cmd[@]}" install -m 0755 "$tmp/usr/bin/promtool" /usr/local/bin/promtool
  else
    echo "install-deps: could not fetch promtool (the /metrics format test will be SKIPPED)" >&2
  fi
  rm -rf "$tmp"
}

if [[ ${#missing[@]} -eq 0 ]]; then
  install_promtool
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
sudo_cmd=()
[[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq >/dev/null
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
install_promtool
