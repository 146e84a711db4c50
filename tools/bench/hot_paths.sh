#!/usr/bin/env bash
# Every row of the hot-path table (docs/performance.md), each a same-run ratio against raw
# PyTorch, plus Accelerate's column where the benchmark can import it (bench-only: added
# with `uv run --with accelerate`, never a dependency of the project). ~16 minutes on the
# 2-core CPU box; run it on an otherwise idle machine. Prints only the report lines.
#   bash tools/bench/hot_paths.sh [--no-accelerate]
set -uo pipefail
cd "$(dirname "$0")"
# The real Accelerate: a bare `accelerate` is met by the workspace's shim (packages/accelerate).
RUN=(uv run --with 'accelerate!=1.15.0+accel.1')
[ "${1:-}" = "--no-accelerate" ] && RUN=(uv run)
status=0
row() { "${RUN[@]}" "$@" 2>&1 | grep -E "ratio|Error|error:" || status=1; }

echo "== from accel import Accelerator after import torch (target: <= 50 ms CPU)"
uv run python bench_import.py 2>&1 | grep -E "^import:|Error|error:" || status=1
echo "== training step, 1 process, tiny MLP (w64, batch 8)"
row python bench_step.py --width 64 --batch-size 8 --aa
echo "== accumulate(4), 1 process, tiny MLP"
row python bench_step.py --width 64 --batch-size 8 --accumulate 4 --aa
echo "== instructions per step and per accumulate(4) micro-step (callgrind; needs valgrind)"
if command -v valgrind >/dev/null; then
    row python bench_step_instructions.py --accumulate 1
    row python bench_step_instructions.py --accumulate 4
else
    echo "(valgrind is not installed: rows left out)"
fi
echo "== accumulate(4), 2 processes, MLP w1024 b64"
row accel launch --cpu --num_processes 2 bench_step.py --accumulate 4 --width 1024 --aa \
    --batch-size 64 --repeats 11
echo "== gather / gather_for_metrics, 2 processes (floor: dist.all_gather + torch.cat)"
row accel launch --cpu --num_processes 2 bench_gather.py
echo "== pipeline-parallel step, 2 processes: 1F1B, GPipe, interleaved 1F1B"
for schedule in 1f1b gpipe interleaved_1f1b; do
    row accel launch --cpu --num_processes 2 bench_pp.py --schedule "$schedule" --repeats 11
done
echo "== save_model 1 GB in shards: disk (fsync), then tmpfs"
row python bench_save_model.py --size-mb 1024
[ -d /dev/shm ] && row python bench_save_model.py --size-mb 1024 --dir /dev/shm
echo "== save_state / load_state, model + Adam ~1 GB, tmpfs"
row python bench_checkpoint.py --size-mb 1024 --dir "$( [ -d /dev/shm ] && echo /dev/shm || echo /tmp )"
echo "== DeepSpeed ZeRO-2 step, 2 processes (floor: a hand-written deepspeed.initialize loop)"
ACCEL_DEEPSPEED_SHM_COMM=0 row accel launch --cpu --num_processes 2 bench_deepspeed.py
echo "== accel launch to the first training step, 2 processes (floor: torchrun)"
row python bench_launch.py --repeats 5
echo "== prepared DataLoader, batch 4: 1 process, then 2"
row python bench_data.py
row accel launch --cpu --num_processes 2 bench_data.py
exit $status
