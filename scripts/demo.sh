#!/usr/bin/env bash
# The main job from scratch: fresh venv, wheel built and installed, then `stalloc demo`: small
# real transformers (dense, recomputation, mixture-of-experts) train on the CPU while their
# allocations are recorded; each trace is planned, replayed through stalloc's runtime, and
# compared with PyTorch's caching allocator. Usage: scripts/demo.sh [stalloc demo options]
set -euo pipefail
VENV=${VENV:-$(cd "$(dirname "$0")/.." && pwd)/.venv-demo}
source "$(dirname "$0")/setup_env.sh"
step "stalloc demo $*"
cd "$REPO"
"$VENV/bin/stalloc" demo "$@"
