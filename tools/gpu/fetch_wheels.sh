#!/usr/bin/env bash
# Fetch, on this (CPU) machine, what the GPU machine lacks to run the GPU suite
# (benchmarks/gpu_suite.py through tools/gpu/run_suite.sh), into DIR (default .whl).
#
# Usage, from the repository root:   bash tools/gpu/fetch_wheels.sh [DIR]
# `/.whl/` is git-ignored (.gitignore), so it travels to the GPU machine only when the device
# tool's `carry` names it: carry [".whl"]. About 13 MB; 20 s here.
#
# Adapted from ../shared/gpu/fetch_wheels.sh (the shared notes are not on the GPU machine, and
# this checkout must not depend on them). What changed, and why:
#   * mmcv WITHOUT compiled ops is built HERE as a pure-Python wheel: `MMCV_WITH_OPS=0 pip wheel`
#     on the mmcv 2.1.0 sdist gives mmcv_lite-2.1.0-py2.py3-none-any.whl, the very files the
#     shared setup_on_gpu.sh builds there. The GPU machine then only unpacks wheels (seconds
#     instead of about a minute of its ~15), and nothing can fail to build there.
#   * The sdist is still carried, for `setup_on_gpu.sh --with-ops` (mmcv's CUDA ops can only be
#     built on the GPU machine, against its torch).
#   * No torch wheel: the GPU machine has its own torch 2.11 (CUDA 13) and Triton, which the suite
#     measures with. No vitattn_mm wheel: run_suite.sh puts this checkout on PYTHONPATH.
#   * One Python for download and build (the project's .venv when present: building the lite
#     wheel imports torch and setuptools); `set -euo pipefail`; a DIR already filled is refreshed
#     (one version of each package: two stop the --no-deps install there).
#   * The list differs from the shared one where a GPU run showed it wrong (2026-11-27):
#     `modelindex` is an empty placeholder, `model-index` holds the module mmpretrain imports;
#     importlib_metadata (mmpretrain imports it) is pinned below 9, whose releases need
#     lazy-importer, which the image lacks.
# Otherwise the download list is the shared one: what mmengine, mmcv, mmdet, mmseg and mmpretrain import
# that the GPU image (KINDS.md: numpy, opencv-python-headless, matplotlib, scipy, rich, pyyaml,
# einops, onnxruntime ... are there) lacks.
set -euo pipefail
dir=${1:-.whl}
mkdir -p "$dir"
py=python3; [ -x .venv/bin/python ] && py=.venv/bin/python
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" -d "$dir" \
  mmengine==0.10.7 mmdet==3.3.0 mmsegmentation==1.2.2 mmpretrain==1.2.0 \
  addict yapf platformdirs termcolor terminaltables prettytable wcwidth pycocotools shapely \
  model-index ordered-set mat4py ftfy "importlib_metadata<9"
# mmcv: no wheel exists for the GPU machine's Python and torch. Carry the sdist (for the ops
# build there) and, built from it here, the pure-Python wheel without ops.
"$py" -m pip download -q --no-deps --no-binary=:all: --no-build-isolation -d "$dir" mmcv==2.1.0
rm -f "$dir"/mmcv_lite-*.whl
MMCV_WITH_OPS=0 "$py" -m pip wheel -q --no-deps --no-build-isolation --no-cache-dir \
  "$dir"/mmcv-2.1.0.tar.gz -w "$dir"
ls -l "$dir"
du -sh "$dir"
