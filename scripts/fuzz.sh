#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, docs/fuzzing.md) with clang and runs each one for a
# bounded time on a scratch copy of its seed corpus. A crash, leak or sanitizer report fails the
# run and prints the input that caused it, in hex.
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET (default 60)] [TARGET ...]
# FUZZ_BUILD (default build/fuzz), FUZZ_WORK (default a temporary folder: the grown corpus and
# any crash input are kept there), FUZZ_JOBS (build jobs, default 2).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
SECONDS_EACH=${1:-60}
shift || true
BUILD=${FUZZ_BUILD:-$REPO/build/fuzz}
if ! command -v clang >/dev/null; then
  echo "scripts/fuzz.sh: clang not found; installing it from the system packages" >&2
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "scripts/fuzz.sh: cannot install clang here (needs root and apt-get)" >&2
    exit 1
  fi
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null
fi
CC=clang cmake -S "$REPO" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTALLOC_BUILD_FUZZ=ON \
  -DSTALLOC_BUILD_TESTS=OFF -DSTALLOC_BUILD_BENCH=OFF -DSTALLOC_INSTALL=OFF >/dev/null
cmake --build "$BUILD" -j "${FUZZ_JOBS:-2}" >/dev/null
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(fuzz_trace_load fuzz_plan_load fuzz_replay fuzz_options fuzz_place)
WORK=${FUZZ_WORK:-$(mktemp -d)}
failed=0
for t in "${TARGETS[@]}"; do
  mkdir -p "$WORK/$t/corpus" "$WORK/$t/artifacts"
  cp -n "$REPO/tests/fuzz/corpus/$t/"* "$WORK/$t/corpus/" 2>/dev/null || true
  log="$WORK/$t/log"
  echo "-- $t: ${SECONDS_EACH}s"
  set +e
  (cd "$WORK/$t" && "$BUILD/tests/fuzz/$t" -max_total_time="$SECONDS_EACH" -timeout=25 -rss_limit_mb=2048 \
     -print_final_stats=1 -artifact_prefix="$WORK/$t/artifacts/" "$WORK/$t/corpus" >"$log" 2>&1)
  rc=$?
  set -e
  grep -a -E "^(stat::number_of_executed_units|stat::peak_rss_mb)|DONE" "$log" | sed 's/^/   /' || true
  if [ "$rc" -ne 0 ]; then
    failed=1
    echo "FAIL: $t exited $rc; the end of its log:" >&2
    grep -a -v -E "^#[0-9]+" "$log" | tail -n 40 >&2
    for f in "$WORK/$t/artifacts/"*; do
      [ -f "$f" ] || continue
      echo "input $(basename "$f") ($(stat -c %s "$f") bytes), hex:" >&2
      od -A x -t x1z -v "$f" | head -n 200 >&2
      echo "reproduce: $BUILD/tests/fuzz/$t $f" >&2
    done
  fi
done
if [ -z "${FUZZ_WORK:-}" ]; then
  if [ "$failed" -eq 0 ]; then rm -rf "$WORK"; else echo "inputs and logs kept in $WORK" >&2; fi
fi
exit "$failed"
