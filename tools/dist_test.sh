#!/usr/bin/env bash
# Distributed evaluation with torchrun.
#   bash tools/dist_test.sh CONFIG CHECKPOINT GPUS [test.py options]
# Multi-node: NNODES, NODE_RANK, MASTER_ADDR, PORT (same on every node).
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 CONFIG CHECKPOINT GPUS [test.py options]" >&2
  exit 2
fi
CONFIG=$1
CHECKPOINT=$2
GPUS=$3
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-"127.0.0.1"}
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON=${PYTHON:-python}

PYTHONPATH="$ROOT:${PYTHONPATH:-}" \
"$PYTHON" -m torch.distributed.run \
    --nnodes="$NNODES" \
    --node_rank="$NODE_RANK" \
    --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$GPUS" \
    --master_port="$PORT" \
    "$ROOT/tools/test.py" \
    "$CONFIG" \
    "$CHECKPOINT" \
    --launcher pytorch "${@:4}"
