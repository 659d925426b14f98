#!/usr/bin/env bash
# Installs what is missing, builds nodeagent into build/ and runs it in the foreground on
# deploy/examples/manifests, with its state and container logs under .state/ (no root needed).
# Ctrl-C stops the agent; the containers keep running (that is the design) until you run
#   ./deploy/run-local.sh --clean
# Usage: ./deploy/run-local.sh [--clean] [extra nodeagent flags]
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
state="$repo/.state"

# /proc/<pid>/stat starttime (field 22), to tell a live process from a reused pid.
start_ticks() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  set -- $stat
  echo "${20}"
}

# Stops the containers a previous run left behind: their process groups, then their shims.
clean() {
  shopt -s nullglob
  local st key pid ticks
  for st in "$state"/root/containers/*/state; do
    grep -qx 'status=running' "$st" || continue
    for key in pid shim_pid; do
      pid=$(sed -n "s/^$key=//p" "$st" | head -n1)
      [[ "$key" == shim_pid ]] && ticks=$(sed -n 's/^shim_start_ticks=//p' "$st")
      [[ "$key" == pid ]] && ticks=$(sed -n 's/^pid_start_ticks=//p' "$st")
      [[ -n "$pid" && "$pid" -gt 0 ]] || continue
      [[ "$(start_ticks "$pid")" == "$ticks" ]] || continue
      if [[ "$key" == pid ]]; then kill -TERM -- "-$pid" 2>/dev/null || true
      else kill -TERM "$pid" 2>/dev/null || true; fi
    done
  done
}
if [[ "${1:-}" == --clean ]]; then
  clean
  rm -rf "$state"
  echo "run-local: stopped leftover containers and removed $state"
  exit 0
fi

./deploy/install-deps.sh
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" "${launcher[@]}" >/dev/null
cmake --build build --target nodeagent nodeagent-shim test-apiserver

port="${NODEAGENT_READ_ONLY_PORT:-10255}"
# The kubelet API (HTTPS, authenticated: every request is refused until the agent is given a
# --client-ca-file or a --kubeconfig for token reviews); NODEAGENT_PORT=0 turns it off.
api_port="${NODEAGENT_PORT:-10250}"
mkdir -p "$state/root" "$state/logs"
cat <<MSG
run-local: nodeagent on $repo/deploy/examples/manifests
  pods:      curl -s http://127.0.0.1:$port/pods | python3 -m json.tool
  health:    curl -s http://127.0.0.1:$port/healthz ; metrics: /metrics ; bad manifests: /manifest-errors
  logs:      $state/logs/<namespace>_<pod>_<uid>/<container>/0.log
  state:     $state/root
  web pod:   curl -s http://127.0.0.1:8080/
Ctrl-C stops the agent (containers keep running); ./deploy/run-local.sh --clean stops them.
MSG
exec ./build/nodeagent \
  --pod-manifest-path="$repo/deploy/examples/manifests" \
  --root-dir="$state/root" \
  --pod-log-dir="$state/logs" \
  --read-only-port="$port" \
  --port="$api_port" \
  --healthz-port=0 \
  --file-check-frequency=20s \
  "$@"
