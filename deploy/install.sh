#!/usr/bin/env bash
# Installs a built nodeagent as a systemd service:
#   /usr/local/bin/{nodeagent,nodeagent-shim,test-apiserver}  (the shim must sit next to nodeagent)
#   /etc/systemd/system/nodeagent.service
#   /etc/nodeagent/config.yaml and /etc/nodeagent/manifests/ (existing files are kept)
# Usage: sudo ./deploy/install.sh [--build-dir DIR] [--with-examples] [--no-start]
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=build
with_examples=0
start=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --with-examples) with_examples=1; shift ;;
    --no-start) start=0; shift ;;
    *) echo "install.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

if [[ $(id -u) -ne 0 ]]; then
  echo "install.sh: run as root (sudo $0)" >&2
  exit 1
fi
for bin in nodeagent nodeagent-shim test-apiserver; do
  if [[ ! -x "$build_dir/$bin" ]]; then
    echo "install.sh: $build_dir/$bin is missing; build first:" >&2
    echo "  cmake -S . -B $build_dir -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build $build_dir" >&2
    exit 1
  fi
done

install -D -m 0755 "$build_dir/nodeagent" /usr/local/bin/nodeagent
install -D -m 0755 "$build_dir/nodeagent-shim" /usr/local/bin/nodeagent-shim
install -D -m 0755 "$build_dir/test-apiserver" /usr/local/bin/test-apiserver
install -D -m 0644 deploy/nodeagent.service /etc/systemd/system/nodeagent.service
install -d -m 0755 /etc/nodeagent/manifests /var/lib/nodeagent /var/log/pods
if [[ ! -e /etc/nodeagent/config.yaml ]]; then
  install -m 0644 deploy/examples/config.yaml /etc/nodeagent/config.yaml
fi
if [[ $with_examples -eq 1 ]]; then
  for m in deploy/examples/manifests/*.yaml; do
    dest=/etc/nodeagent/manifests/$(basename "$m")
    [[ -e "$dest" ]] || install -m 0644 "$m" "$dest"
  done
fi

if command -v systemctl >/dev/null && [[ -d /run/systemd/system ]]; then
  systemctl daemon-reload
  systemctl enable nodeagent.service >/dev/null
  if [[ $start -eq 1 ]]; then
    # restart: a running agent is replaced; its containers keep running and are adopted.
    systemctl restart nodeagent.service
    echo "nodeagent is running: systemctl status nodeagent; curl -s http://127.0.0.1:10255/pods"
  fi
else
  echo "install.sh: systemd is not running here; start it by hand:"
  echo "  /usr/local/bin/nodeagent --config=/etc/nodeagent/config.yaml"
fi
