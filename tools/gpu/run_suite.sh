#!/usr/bin/env bash
# The one command of a GPU session, run from the repository root with .whl carried:
#
#   bash tools/gpu/run_suite.sh [gpu_suite.py options]
#
# 1. tools/gpu/setup_on_gpu.sh: the carried wheels into /tmp/site, mmcv without compiled ops
#    (about 15 s; nothing is compiled);
# 2. export PYTHONPATH=/tmp/site:$PWD: this checkout's vitattn_mm, not installed;
# 3. python3 benchmarks/gpu_suite.py --device cuda --out "$OUT" --budget-s $BUDGET_S (default 360)
#    under a hard `timeout` of the budget + 75 s, its output also in $OUT/suite.log.
# DEVICE=cpu (with --smoke) rehearses the whole script on a CPU machine.
# Setup, imports (~15 s), the budget and the summary fit 8 minutes; the sections the budget does
# not cover are skipped with a note, and every section's CSV is on disk as soon as it has rows.
# $OUT then holds env.json, the sections' CSVs, summary.md, steps.json (the projected steps, for
# benchmarks/calibrate.py) and suite.log. The device tool brings back 8 files at most: where a
# run leaves more (a full run leaves 9), the log is appended to summary.md instead.
set -uo pipefail
out=${OUT:-work_dirs/gpu_suite}
budget=${BUDGET_S:-360}
mkdir -p "$out"
log="$out/suite.log"
start=$(date +%s)
echo "run_suite: $(date -u '+%F %T UTC'), budget ${budget} s, out $out" | tee "$log"
bash tools/gpu/setup_on_gpu.sh 2>&1 | tee -a "$log"
if [ "${PIPESTATUS[0]}" != 0 ]; then echo "run_suite: setup failed" | tee -a "$log"; exit 1; fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout -k 15 $((${budget%.*} + 75)) python3 benchmarks/gpu_suite.py --device "${DEVICE:-cuda}" --out "$out" \
  --budget-s "$budget" "$@" 2>&1 | tee -a "$log"
rc=${PIPESTATUS[0]}
echo "run_suite: $(( $(date +%s) - start )) s in all, gpu_suite exit status $rc" | tee -a "$log"
if [ "$(find "$out" -maxdepth 1 -type f | wc -l)" -gt 8 ]; then
  { printf '\n## suite.log\n\n```\n'; cat "$log"; printf '```\n'; } >> "$out/summary.md" && rm -f "$log"
fi
exit "$rc"
