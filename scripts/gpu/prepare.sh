#!/usr/bin/env bash
# Run on a machine with package access, before carrying the repository to a GPU machine that
# has none: builds the stalloc wheel and downloads the wheels the GPU machine lacks (cffi and
# pycparser) into scripts/gpu/wheels/ (ignored by git). run_all.sh installs from there with
# `pip install --no-index`.
#   bash scripts/gpu/prepare.sh        (PYTHON=... picks the interpreter; the GPU machine's
#                                       Python version must match: PY_VERSION=3.12 by default)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PYTHON=${PYTHON:-python3}
PY_VERSION=${PY_VERSION:-3.12}
WHEELS="$HERE/wheels"
mkdir -p "$WHEELS"
rm -f "$WHEELS"/*.whl
# cffi is a compiled wheel: fetch it for the GPU machine's Python, and for this one too so the
# same route can be tried here (CI runs it without a GPU).
here_version=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
for v in $(printf '%s\n' "$PY_VERSION" "$here_version" | sort -u); do
  "$PYTHON" -m pip download -q --disable-pip-version-check --only-binary=:all: \
    --python-version "$v" --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    -d "$WHEELS" cffi pycparser
done
# stalloc itself: a py3 wheel with libstalloc.so (pure C, no Python ABI). Built without PyTorch's
# headers the wheel lacks libstalloc_torch.so; run_all.sh rebuilds it there when torch is present.
"$PYTHON" -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps \
  -C build-dir="$REPO/build/gpu-wheel" -w "$WHEELS" "$REPO"
ls -1 "$WHEELS"
