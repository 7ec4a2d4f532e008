#!/usr/bin/env bash
# Run ON the GPU machine, from the repository root, with the wheel folder carried (WHL, default
# .whl, filled by tools/gpu/fetch_wheels.sh). Installs the carried wheels into /tmp/site, mmcv
# WITHOUT compiled ops included (mmcv_lite: seconds, nothing compiled). That serves backbone-level
# work (the GPU suite), provided `import vitattn_mm` and building a backbone import no mmcv.ops.
# Every later command: export PYTHONPATH=/tmp/site:$PWD
#
#   bash tools/gpu/setup_on_gpu.sh             # wheels + mmcv without ops (what run_suite.sh does)
#   bash tools/gpu/setup_on_gpu.sh --with-ops  # wheels, then mmcv's CUDA ops built in the background
#   bash tools/gpu/setup_on_gpu.sh --wait      # poll that build (prints 'mmcv ready' or its log's tail)
#
# Adapted from ../shared/gpu/setup_on_gpu.sh (not on the GPU machine). What changed, and why:
#   * mmcv without ops is the prebuilt pure wheel fetch_wheels.sh made (mmcv_lite-*.whl), installed
#     with the others; only if it is missing is it built from the sdist with MMCV_WITH_OPS=0, as
#     the shared script does.
#   * --with-ops leaves mmcv_lite out (it holds the same `mmcv` package without _ext, and pip
#     --target would not replace it). The C++ standard flag of mmcv's setup.py (-std=c++17) is
#     patched only when MMCV_CXX_STD is set (e.g. MMCV_CXX_STD=c++20, which torch 2.14's headers
#     needed for the CPU build here, ../shared/wheels/README.md); the GPU machine's torch is 2.11,
#     whose headers are C++17. The ops build is not needed by the suite: do it only in a second
#     run, after the backbone-level results are saved (it takes 5-10 minutes).
#   * Fails loudly (set -euo pipefail) and prints what it installed, with the time it took.
set -euo pipefail
whl=${WHL:-.whl}
site=${SITE:-/tmp/site}
build=/tmp/mmcv_build
if [ "${1:-}" = "--wait" ]; then
  for _ in $(seq 1 55); do [ -f $build/done ] && break; sleep 10; done
  if [ -f $build/ok ]; then echo "mmcv ready"; else tail -30 $build/log; fi
  exit 0
fi
start=$(date +%s)
[ -d "$whl" ] || { echo "setup_on_gpu: no wheel folder $whl (carry it: carry [\"$whl\"])" >&2; exit 1; }
wheels=()
for f in "$whl"/*.whl; do
  case "$(basename "$f")" in mmcv_lite-*) [ "${1:-}" = "--with-ops" ] && continue ;; esac
  wheels+=("$f")
done
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "${wheels[@]}"
if [ "${1:-}" != "--with-ops" ]; then
  if ! ls "$whl"/mmcv_lite-*.whl > /dev/null 2>&1; then
    echo "setup_on_gpu: no mmcv_lite wheel; building mmcv without ops from the sdist"
    rm -rf $build && mkdir -p $build && tar xzf "$whl"/mmcv-2.1.0.tar.gz -C $build
    (cd $build/mmcv-2.1.0 && PYTHONPATH="$site" MMCV_WITH_OPS=0 python3 -m pip install -q --no-deps \
       --no-build-isolation --no-cache-dir --target "$site" .)
  fi
  PYTHONPATH="$site" python3 -c "import mmcv, mmengine, torch; print('mmcv', mmcv.__version__, \
'(no compiled ops), mmengine', mmengine.__version__, ', torch', torch.__version__)"
  echo "setup_on_gpu: $(( $(date +%s) - start )) s"
  exit 0
fi
arch=$(python3 -c "import torch; m, n = torch.cuda.get_device_capability(); print(f'{m}.{n}')")
rm -rf $build && mkdir -p $build && tar xzf "$whl"/mmcv-2.1.0.tar.gz -C $build
cd $build/mmcv-2.1.0
if [ -n "${MMCV_CXX_STD:-}" ]; then sed -i "s/-std=c++17/-std=${MMCV_CXX_STD}/g" setup.py; fi
setsid bash -c "PYTHONPATH=$site MMCV_WITH_OPS=1 FORCE_CUDA=1 TORCH_CUDA_ARCH_LIST=$arch MAX_JOBS=\$(nproc) \
  python3 -m pip install --no-deps --no-build-isolation --no-cache-dir --target $site . > $build/log 2>&1 \
  && PYTHONPATH=$site python3 -c 'import mmcv.ops' >> $build/log 2>&1 && touch $build/ok; \
  touch $build/done" > /dev/null 2>&1 < /dev/null &
echo "building mmcv's ops for sm_$arch in the background; poll with: bash tools/gpu/setup_on_gpu.sh --wait"
