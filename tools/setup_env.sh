#!/usr/bin/env bash
# Create (or verify) the project's isolated environment.
#
#   bash tools/setup_env.sh            # -> .venv with the pinned stack
#   VENV=/path/to/venv bash tools/setup_env.sh
#   WHEELHOUSE=/dir/with/wheels bash tools/setup_env.sh
#
# Idempotent: a second run checks a stamp (hash of the pinned requirements and
# of this script) plus an import of mmcv's compiled ops and returns in seconds
# without touching the environment.
#
# mmcv 2.1.0 publishes no wheel for torch 2.14, and mmdet 3.3.0 / mmseg 1.2.2
# refuse mmcv >= 2.2. We therefore take a matching mmcv wheel from a wheelhouse
# (../shared/wheels by default) and otherwise build it from the sdist with its
# compiled CPU ops (C++20 flag patched in, no pip cache so no stale wheel from
# another torch is reused).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
# Absolute: the import checks below run from / (`make env` passes .venv).
case "$VENV" in /*) ;; *) VENV="$PWD/$VENV" ;; esac
WHEELHOUSE="${WHEELHOUSE:-$ROOT/../shared/wheels}"
PYTHON="${PYTHON:-python3}"
MMCV_VERSION=2.1.0
TORCH_VERSION=2.14.1

PY="$VENV/bin/python"
STAMP="$VENV/.vitattn_mm_stamp"
# mmseg's own backbone tests, which tests/test_stock_tests.py runs unchanged
# against this package's classes: from the published sdist of the installed
# mmseg (pinned, hash-checked; mmdet and mmpretrain publish no tests).
MMSEG_SDIST=mmsegmentation-1.2.2
MMSEG_SDIST_SHA256=35dbd8089fd1c2baa467d3b7c2e1b197043f4f955ad5de8005170eee469102ec
STOCK_TESTS="$VENV/share/vitattn_mm/stock_tests"
STOCK_TEST_FILES="test_swin.py test_vit.py utils.py"
REQS="$ROOT/requirements"
want_stamp="$(cat "$REQS/runtime.txt" "$REQS/tests.txt" "$REQS/constraints.txt" \
  "$ROOT/tools/setup_env.sh" "$ROOT/setup.py" | sha256sum | cut -d' ' -f1)"

log() { printf '[setup_env] %s\n' "$*"; }

env_ok() {
  [ -x "$PY" ] || return 1
  for f in $STOCK_TEST_FILES; do
    [ -f "$STOCK_TESTS/$MMSEG_SDIST/tests/test_models/test_backbones/$f" ] || return 1
  done
  [ "$(cat "$STAMP" 2>/dev/null)" = "$want_stamp" ] || return 1
  # Run from / so that the installed vitattn_mm is found, not the working
  # directory's: it must be this checkout's (a venv shared with another
  # checkout would test that one's code).
  (cd / && "$PY" - "$ROOT" <<'EOF') >/dev/null 2>&1
import os.path as osp, sys
import mmcv, mmcv.ops, mmdet, mmseg, mmpretrain, torch, vitattn_mm  # noqa
import vitattn_tools  # the tools' helpers, installed beside the library
from mmcv.ops import nms
for package in (vitattn_mm, vitattn_tools):
    assert osp.realpath(package.__file__).startswith(
        osp.realpath(sys.argv[1]) + '/'), package.__file__
nms(torch.rand(4, 4) * 10, torch.rand(4), 0.5)
EOF
}

if env_ok; then
  log "environment at $VENV is up to date"
  exit 0
fi

if [ ! -x "$PY" ]; then
  log "creating virtual environment $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$PY" -m pip --disable-pip-version-check)

"${PIP[@]}" install -q wheel ninja
"${PIP[@]}" install -q -c "$REQS/constraints.txt" -r "$REQS/runtime.txt" -r "$REQS/tests.txt"

installed_mmcv() {
  "$PY" - <<EOF 2>/dev/null
import importlib.metadata as m, mmcv.ops  # noqa: F401  (compiled ops must load)
print(m.version('mmcv'))
EOF
}

if [ "$(installed_mmcv)" != "$MMCV_VERSION" ]; then
  pytag="cp$("$PY" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')"
  torch_now="$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')"
  wheel=""
  if [ "$torch_now" = "$TORCH_VERSION" ]; then
    wheel="$(ls "$WHEELHOUSE"/mmcv-$MMCV_VERSION-$pytag-$pytag-linux_"$(uname -m)".whl 2>/dev/null | head -n1 || true)"
  fi
  if [ -n "$wheel" ]; then
    log "installing mmcv from wheelhouse: $wheel"
    "${PIP[@]}" install -q --no-deps --force-reinstall "$wheel"
  else
    log "no matching mmcv wheel in $WHEELHOUSE: building mmcv $MMCV_VERSION from source (~12 min on 2 cores)"
    build="$(mktemp -d)"
    trap 'rm -rf "$build"' EXIT
    "${PIP[@]}" download -q --no-deps --no-binary :all: --no-build-isolation \
      "mmcv==$MMCV_VERSION" -d "$build"
    tar xzf "$build/mmcv-$MMCV_VERSION.tar.gz" -C "$build"
    # torch >= 2.6 headers need C++20; mmcv 2.1.0 hard-codes C++17.
    sed -i 's/-std=c++17/-std=c++20/g' "$build/mmcv-$MMCV_VERSION/setup.py"
    (cd "$build/mmcv-$MMCV_VERSION" && MMCV_WITH_OPS=1 FORCE_CUDA="${FORCE_CUDA:-0}" \
      MAX_JOBS="${MAX_JOBS:-$(nproc)}" "${PIP[@]}" install --no-cache-dir --no-deps \
      --no-build-isolation .)
  fi
  # mmcv's own runtime requirements (the wheel was installed without deps).
  "${PIP[@]}" install -q -c "$REQS/constraints.txt" addict mmengine numpy packaging Pillow \
    pyyaml yapf opencv-python
fi

"${PIP[@]}" install -q --no-deps --no-build-isolation -e "$ROOT"

log "fetching mmseg's backbone tests ($MMSEG_SDIST sdist)"
sdist="$(mktemp -d)"
echo "mmsegmentation==${MMSEG_SDIST#*-} --hash=sha256:$MMSEG_SDIST_SHA256" > "$sdist/pin.txt"
"${PIP[@]}" download -q --no-deps --no-binary :all: --no-build-isolation \
  --require-hashes -r "$sdist/pin.txt" -d "$sdist"
mkdir -p "$STOCK_TESTS"
tar xzf "$sdist/$MMSEG_SDIST.tar.gz" -C "$STOCK_TESTS" \
  $(for f in $STOCK_TEST_FILES; do echo "$MMSEG_SDIST/tests/test_models/test_backbones/$f"; done)
rm -rf "$sdist"

if ! (cd / && "$PY" -c 'import mmcv.ops, vitattn_mm, vitattn_tools') ; then
  log "import check failed" >&2
  exit 1
fi
echo "$want_stamp" > "$STAMP"
log "environment ready: $VENV ($("$PY" -c 'import torch, mmcv, mmdet, mmseg, mmpretrain; print(f"torch {torch.__version__}, mmcv {mmcv.__version__}, mmdet {mmdet.__version__}, mmseg {mmseg.__version__}, mmpretrain {mmpretrain.__version__}")'))"
