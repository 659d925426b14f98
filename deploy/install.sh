#!/usr/bin/env bash
# Installs a built nodeagent as a systemd service:
#   /usr/local/bin/{nodeagent,nodeagent-shim}  (the shim must sit next to nodeagent)
#   /usr/local/lib/nodeagent/nodeagent-cri.so (the CRI runtime, loaded with --runtime=cri)
#   /usr/local/bin/test-apiserver              (only with --with-test-apiserver: it has
#                                               unauthenticated fault-injection endpoints)
#   /usr/local/share/doc/nodeagent/README.md   (the unit's Documentation=)
#   /etc/systemd/system/nodeagent.service
#   /etc/nodeagent/config.yaml and /etc/nodeagent/manifests/ (existing files are kept)
# --uninstall removes the binaries, the unit and the README; /etc/nodeagent, /etc/default/nodeagent,
# /var/lib/nodeagent and /var/log/pods are kept, and running containers are left alone.
# --root DIR installs under DIR instead of / (and leaves systemd alone).
# Usage: sudo ./deploy/install.sh [--build-dir DIR] [--with-examples] [--with-test-apiserver]
#                                 [--no-start] [--root DIR] [--uninstall]
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=build
with_examples=0
with_test_apiserver=0
start=1
root=
uninstall=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir="${2:?--build-dir needs a directory}"; shift 2 ;;
    --with-examples) with_examples=1; shift ;;
    --with-test-apiserver) with_test_apiserver=1; shift ;;
    --no-start) start=0; shift ;;
    --root) root="${2:?--root needs a directory}"; root="${root%/}"; shift 2 ;;
    --uninstall) uninstall=1; shift ;;
    *) echo "install.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

if [[ -z "$root" && $(id -u) -ne 0 ]]; then
  echo "install.sh: run as root (sudo $0)" >&2
  exit 1
fi
# systemd is only touched for a real install on a host that runs it.
use_systemd=0
if [[ -z "$root" ]] && command -v systemctl >/dev/null && [[ -d /run/systemd/system ]]; then
  use_systemd=1
fi

bin_dir="$root/usr/local/bin"
lib_dir="$root/usr/local/lib/nodeagent"
doc_dir="$root/usr/local/share/doc/nodeagent"
unit="$root/etc/systemd/system/nodeagent.service"

if [[ $uninstall -eq 1 ]]; then
  if [[ $use_systemd -eq 1 ]]; then
    systemctl disable --now nodeagent.service >/dev/null 2>&1 || true
  fi
  rm -f "$bin_dir/nodeagent" "$bin_dir/nodeagent-shim" "$bin_dir/test-apiserver" "$unit"
  rm -rf "$lib_dir"
  rm -rf "$doc_dir"
  [[ $use_systemd -eq 1 ]] && systemctl daemon-reload
  echo "nodeagent uninstalled; kept: $root/etc/nodeagent, $root/var/lib/nodeagent, $root/var/log/pods"
  echo "(containers it started keep running: stop them before removing $root/var/lib/nodeagent)"
  exit 0
fi

bins=(nodeagent nodeagent-shim)
[[ $with_test_apiserver -eq 1 ]] && bins+=(test-apiserver)
for bin in "${bins[@]}" nodeagent-cri.so; do
  if [[ ! -f "$build_dir/$bin" ]]; then
    echo "install.sh: $build_dir/$bin is missing; build first:" >&2
    echo "  cmake -S . -B $build_dir -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build $build_dir" >&2
    exit 1
  fi
done

for bin in "${bins[@]}"; do
  install -D -m 0755 "$build_dir/$bin" "$bin_dir/$bin"
done
install -D -m 0644 "$build_dir/nodeagent-cri.so" "$lib_dir/nodeagent-cri.so"
install -D -m 0644 README.md "$doc_dir/README.md"
install -D -m 0644 deploy/nodeagent.service "$unit"
install -d -m 0755 "$root/etc/nodeagent/manifests" "$root/var/lib/nodeagent" "$root/var/log/pods"
if [[ ! -e "$root/etc/nodeagent/config.yaml" ]]; then
  install -m 0644 deploy/examples/config.yaml "$root/etc/nodeagent/config.yaml"
fi
if [[ $with_examples -eq 1 ]]; then
  for m in deploy/examples/manifests/*.yaml; do
    dest="$root/etc/nodeagent/manifests/$(basename "$m")"
    [[ -e "$dest" ]] || install -m 0644 "$m" "$dest"
  done
fi

if [[ $use_systemd -eq 1 ]]; then
  systemctl daemon-reload
  systemctl enable nodeagent.service >/dev/null
  if [[ $start -eq 1 ]]; then
    # restart: a running agent is replaced; its containers keep running and are adopted.
    systemctl restart nodeagent.service
    echo "nodeagent is running: systemctl status nodeagent; curl -s http://127.0.0.1:10255/pods"
  fi
elif [[ -z "$root" ]]; then
  echo "install.sh: systemd is not running here; start it by hand:"
  echo "  /usr/local/bin/nodeagent --config=/etc/nodeagent/config.yaml"
else
  echo "nodeagent installed under $root"
fi
