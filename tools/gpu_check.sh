#!/usr/bin/env bash
# Every GPU test and benchmark, in one command, in well under 8 minutes on one GPU machine.
#
# With uv and a network: `bash tools/gpu_check.sh` syncs the locked environment and runs.
# On the offline device machine (its python3 already holds torch, pytest, safetensors,
# packaging): first, here, `uv build --all-packages -o .gpu-wheels/` (pure-Python wheels,
# git-ignored), carry `.gpu-wheels`, and run `bash tools/gpu_check.sh` there: the wheels are
# installed into a temporary site directory so the entry points (strategies, CLI verbs) exist.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0

if [ -d .gpu-wheels ]; then  # the offline device machine (it may have uv, but no index)
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/accel-site .gpu-wheels/*.whl || exit 1
    export PYTHONPATH=/tmp/accel-site
    PY=(python3)
else
    uv sync --locked -q || exit 1
    PY=(uv run python)
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"${PY[@]}" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"

echo "== GPU tests (-m gpu)"
# Only the modules that hold GPU tests: collecting the others would import optional
# dependencies (trackers, torchdata) that a bare GPU machine's python may not have.
mapfile -t gpu_files < <(grep -rl --include='test_*.py' 'mark.gpu' packages tests | sort)
"${PY[@]}" -m pytest -m gpu -q -rs -p no:cacheprovider "${gpu_files[@]}" || status=1

echo "== benchmarks on the GPU"
(cd tools/bench && "${PY[@]}" bench_step.py --device auto --repeats 15) || status=1
(cd tools/bench && "${PY[@]}" bench_precision.py --device auto --repeats 15) || status=1
(cd tools/bench && "${PY[@]}" bench_checkpoint.py --device auto --size-mb 1024 --repeats 5) || status=1
(cd tools/bench && "${PY[@]}" bench_inference.py --device auto --size-mb 1024 --repeats 3) || status=1
if "${PY[@]}" -c "import deepspeed" >/dev/null 2>&1; then  # DeepSpeed: a locked env has it
    (cd tools/bench && "${PY[@]}" -m accel_launch launch --num_processes 1 bench_deepspeed.py \
        --device auto) || status=1
else
    echo "== bench_deepspeed skipped: deepspeed is not installed"
fi
exit $status
