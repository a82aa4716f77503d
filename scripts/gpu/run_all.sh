#!/usr/bin/env bash
# The GPU check kit, one command: installs stalloc from the wheel and the carried cffi/pycparser
# wheels in scripts/gpu/wheels/ (scripts/gpu/prepare.sh, no index needed) into a fresh virtual
# environment that sees the machine's torch and transformers, then runs every check
# (scripts/gpu/run_all.py) and writes results.json and results.md to $OUT (default ./gpu-results).
# Without a GPU the same install route runs and each check runs its CPU-visible part and says it
# was skipped for want of a device.
#   bash scripts/gpu/prepare.sh     # where packages can be downloaded
#   bash scripts/gpu/run_all.sh [--only CHECK...] [--steps N]   # on the GPU machine
#   KIT_DRIVER_TIMER=1 bash scripts/gpu/run_all.sh ...   # also time stalloc's CUDA driver calls
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PYTHON=${PYTHON:-python3}
OUT=${OUT:-$PWD/gpu-results}
VENV=${KIT_VENV:-$REPO/.venv-gpu-kit}
WHEELS="$HERE/wheels"
mkdir -p "$OUT"
if ! ls "$WHEELS"/cffi-*.whl "$WHEELS"/pycparser-*.whl >/dev/null 2>&1; then
  echo "run_all.sh: no cffi/pycparser wheels in $WHEELS: run scripts/gpu/prepare.sh first" >&2
  exit 2
fi
echo "== virtual environment $VENV (system site packages: the machine's torch, transformers)"
rm -rf "$VENV"
"$PYTHON" -m venv --system-site-packages "$VENV"
PY="$VENV/bin/python"
# --system-site-packages sees only the base interpreter's packages; where $PYTHON is itself a
# virtual environment (as on images that install torch into one), add its packages too.
"$PYTHON" -c 'import site, sys; print("\n".join(p for p in sys.path if p.endswith("-packages")))' \
  > "$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/kit_base.pth"
if [ -n "${KIT_SITE:-}" ]; then
  # Another environment's packages (CI: the test venv's torch), after the kit's own.
  "$PY" -c 'import sys, sysconfig, pathlib; pathlib.Path(sysconfig.get_paths()["purelib"], "kit_site.pth").write_text(sys.argv[1] + "\n")' "$KIT_SITE"
fi
echo "== install from the carried wheels (pip --no-index)"
"$PY" -m pip install -q --disable-pip-version-check --no-index --find-links "$WHEELS" cffi pycparser
wheel=$(ls "$WHEELS"/stalloc-*.whl 2>/dev/null | head -1 || true)
install_wheel() { "$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --force-reinstall "$1"; }
# libstalloc_torch.so (typed OOM) links the libc10 it was built against: one built for another
# PyTorch does not load here (the seventh GPU session: built on 2.13, run on 2.11).
typed_plug_loads() { "$PY" -c 'import sys; from stalloc.integrations import torch_backend as t; sys.exit(t._load_plug(t.TYPED_PLUG)[0] is None)' 2>/dev/null; }
[ -n "$wheel" ] && install_wheel "$wheel"
if "$PY" -c 'import torch' 2>/dev/null && { [ -z "$wheel" ] || ! typed_plug_loads; }; then
  # No carried wheel, or its libstalloc_torch.so is missing or built for another PyTorch:
  # build here (scikit-build-core, cmake and ninja are on the machine) against this PyTorch.
  echo "== building the stalloc wheel here against this machine's PyTorch"
  "$PY" -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps --no-index \
    -C build-dir="$REPO/build/gpu-kit" -w "$OUT/wheel" "$REPO"
  wheel=$(ls "$OUT"/wheel/stalloc-*.whl | head -1)
  install_wheel "$wheel"
fi
[ -n "$wheel" ] || { echo "run_all.sh: no stalloc wheel in $WHEELS and no torch to build one: run scripts/gpu/prepare.sh" >&2; exit 2; }
echo "== stalloc from $(basename "$wheel")"
if [ "${KIT_DRIVER_TIMER:-0}" = 1 ] && [ -z "${STALLOC_CUDA_DRIVER:-}" ]; then
  # Time every CUDA driver call stalloc makes (driver_timer.c): the checks then report where
  # the growable pool's step time goes. x86-64 only.
  mkdir -p "$REPO/build"
  gcc -O2 -shared -fPIC -o "$REPO/build/driver_timer.so" "$HERE/driver_timer.c" -ldl
  export STALLOC_CUDA_DRIVER="$REPO/build/driver_timer.so"
  echo "== CUDA driver calls timed through $STALLOC_CUDA_DRIVER"
fi
echo "== checks"
cd "$OUT"
exec "$PY" "$HERE/run_all.py" --out "$OUT" "$@"   # e.g. --only torch_backend
