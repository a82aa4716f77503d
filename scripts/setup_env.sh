# Sourced by scripts/test.sh and scripts/demo.sh: makes a fresh virtual environment at $VENV,
# installs the build and run dependencies, then builds the stalloc wheel and installs it.
# torch is pinned to 2.13.0: that CPU build installs from local disk on the project machines,
# any other torch spec may download several GB.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${VENV:?}
PYTHON=${PYTHON:-python3}

step() { printf '\n== %s\n' "$*"; }

step "fresh virtual environment in $VENV"
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -m pip install -q --disable-pip-version-check \
  "torch==2.13.0" cffi numpy pytest hypothesis scikit-build-core cmake ninja matplotlib ${EXTRA_PACKAGES:-}

step "build the wheel and install it"
rm -rf "$REPO/dist"
"$PY" -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps \
  -C build-dir="$REPO/build/wheel" -w "$REPO/dist" "$REPO"
"$PY" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$REPO"/dist/stalloc-*.whl
export PATH="$VENV/bin:$PATH"
