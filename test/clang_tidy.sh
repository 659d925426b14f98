#!/usr/bin/env bash
# Runs clang-tidy, with the checks of .clang-tidy, over every .cpp of the agent's own code (agent
# api base cmd config podmanager podworkers; not test/) and fails on any warning. Slow and
# CPU-heavy, so neither ctest nor CI runs it: run it by hand after a build.
# Usage: test/clang_tidy.sh [BUILD_DIR]   (BUILD_DIR holds compile_commands.json; default build)
#   JOBS=N        parallel clang-tidy processes (default 2), each under `nice -n 19`
#   CLANG_TIDY=P  the clang-tidy to use (default: the first clang-tidy, clang-tidy-N on PATH)
# Without clang-tidy it prints a SKIPPED line and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${1:-build}"
jobs="${JOBS:-2}"

tidy="${CLANG_TIDY:-}"
if [ -z "$tidy" ]; then
  for candidate in clang-tidy clang-tidy-{20..14}; do
    if command -v "$candidate" >/dev/null 2>&1; then
      tidy="$(command -v "$candidate")"
      break
    fi
  done
fi
if [ -z "$tidy" ]; then
  echo "************************************************************" >&2
  echo "SKIPPED: clang-tidy not installed (nothing was checked)" >&2
  echo "************************************************************" >&2
  exit 0
fi
if [ ! -f "$build_dir/compile_commands.json" ]; then
  echo "clang_tidy.sh: no $build_dir/compile_commands.json (configure with cmake first)" >&2
  exit 2
fi

logs="$(mktemp -d "${TMPDIR:-/tmp}/nodeagent-clang-tidy-XXXXXX")"
trap 'rm -rf "$logs"' EXIT
mapfile -t files < <(find agent api base cmd config podmanager podworkers -name '*.cpp' | sort)
echo "clang_tidy.sh: $("$tidy" --version | grep -o 'version [0-9.]*'), ${#files[@]} files," \
  "$jobs jobs, compile commands of $build_dir" >&2
start=$(date +%s)
# One log per file, printed in order afterwards, so parallel outputs do not interleave.
# -Wno-error: the build's -Werror would turn clang's own warnings (not checked here) into errors.
# Boost 1.74's asio looks for clang's coroutines under <experimental/coroutine> only (libc++):
# with libstdc++ it must be told that co_await and <coroutine> are there.
printf '%s\n' "${files[@]}" |
  xargs -P "$jobs" -I{} sh -c \
    'nice -n 19 "$1" -p "$2" --quiet --extra-arg=-Wno-error \
       --extra-arg=-Wno-unknown-warning-option --extra-arg=-DBOOST_ASIO_HAS_CO_AWAIT=1 \
       --extra-arg=-DBOOST_ASIO_HAS_STD_COROUTINE=1 "$3" >"$4/$(echo "$3" | tr / _).log" 2>&1 ||
       echo "exit status $?" >>"$4/$(echo "$3" | tr / _).log"' \
    sh "$tidy" "$build_dir" {} "$logs" || true
elapsed=$(($(date +%s) - start))

failed=0
for f in "${files[@]}"; do
  log="$logs/$(echo "$f" | tr / _).log"
  # Keep diagnostics and their snippets; drop clang-tidy's "N warnings generated." chatter.
  if grep -qE '(warning|error): |^exit status' "$log"; then
    echo "=== $f"
    grep -vE '^[0-9]+ (warning|error)s? generated\.$' "$log"
    failed=1
  fi
done
# A header's warning shows once per file that includes it: count distinct ones.
count=$(cat "$logs"/*.log | { grep -E ': (warning|error): ' || true; } | sort -u | wc -l)
echo "clang_tidy.sh: $count distinct warnings/errors in ${elapsed}s" >&2
exit "$failed"
