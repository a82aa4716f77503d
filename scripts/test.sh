#!/usr/bin/env bash
# The whole test suite from scratch: fresh venv, wheel built and installed, pytest against the
# installed package, ctest, and the C tests again under AddressSanitizer + UndefinedBehavior-
# Sanitizer and under ThreadSanitizer, then each libFuzzer target for a bounded time (scripts/fuzz.sh,
# which installs clang if missing). Usage: scripts/test.sh   (VENV=... to relocate the venv;
# FUZZ_SECONDS=... per fuzz target, default 60)
set -euo pipefail
VENV=${VENV:-$(cd "$(dirname "$0")/.." && pwd)/.venv-test}
EXTRA_PACKAGES="jax"
source "$(dirname "$0")/setup_env.sh"
JOBS=${JOBS:-2}

step "pytest (installed package)"
cd "$REPO"
set +e
"$PY" -m pytest -q tests/python
rc=$?
set -e
if [ "$rc" -eq 5 ]; then echo "pytest collected no tests: that is a failure here" >&2; exit 1; fi
[ "$rc" -eq 0 ] || exit "$rc"

step "GPU kit without a GPU: prepare.sh, then run_all.sh's install route and CPU parts"
PYTHON="$PY" bash "$REPO/scripts/gpu/prepare.sh"
KIT_SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
  PYTHON="$PYTHON" OUT="$REPO/build/gpu-kit-results" bash "$REPO/scripts/gpu/run_all.sh"

ctest_build() { # name, extra cmake args...
  local dir="$REPO/build/$1"; shift
  cmake -S "$REPO" -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir" -j "$JOBS" >/dev/null
  ctest --test-dir "$dir" -j "$JOBS" --output-on-failure
}

step "ctest"
ctest_build ctest -DCMAKE_BUILD_TYPE=RelWithDebInfo

step "ctest under AddressSanitizer and UndefinedBehaviorSanitizer"
ctest_build asan -DCMAKE_BUILD_TYPE=Debug -DSTALLOC_SANITIZE=address,undefined -DSTALLOC_BUILD_BENCH=OFF

step "ctest under ThreadSanitizer"
# Newer kernels randomise more address bits than TSan's runtime expects: run without ASLR
# where setarch allows it.
SETARCH=""
if setarch "$(uname -m)" -R true 2>/dev/null; then SETARCH="setarch $(uname -m) -R"; fi
dir="$REPO/build/tsan"
cmake -S "$REPO" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTALLOC_SANITIZE=thread -DSTALLOC_BUILD_BENCH=OFF >/dev/null
cmake --build "$dir" -j "$JOBS" >/dev/null
TSAN_OPTIONS="halt_on_error=1" $SETARCH ctest --test-dir "$dir" -j "$JOBS" --output-on-failure

step "libFuzzer targets (tests/fuzz, docs/fuzzing.md), ${FUZZ_SECONDS:-60} s each"
bash "$REPO/scripts/fuzz.sh" "${FUZZ_SECONDS:-60}"

step "all tests passed"
