"""``from accel import Accelerator`` loads no backend it does not use (issue 39.6).

A backend's modules load when it is selected or one of its names is used: the strategies
(DDP, FSDP2, the mesh, pipelines, DeepSpeed) when an ``Accelerator`` is built and
``prepare`` runs, the precisions when one is resolved, a tracker's module when a run
names it, the data loaders at the first ``prepare``, big-model inference and the launcher
when asked for. Each check runs in a fresh interpreter, so what other tests imported cannot
hide a stray import. The cost itself is measured by tools/bench/bench_import.py (target:
at most 50 ms on top of ``import torch``; docs/performance.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: Modules (and everything under them) that ``from accel import Accelerator`` must not load.
NOT_AT_IMPORT = (
    # strategies and their configuration: loaded by Accelerator() (selection) and prepare
    "accel._resolve", "accel_parallel.selection", "accel_parallel.presets",
    "accel_parallel.single", "accel_parallel.ddp", "accel_parallel.fsdp", "accel_parallel.mesh",
    "accel_parallel.pipeline", "accel_parallel.deepspeed",
    # precisions other than the interface: resolved when an Accelerator is built
    "accel_precision.ao", "accel_precision.te", "accel_precision.resolve",
    # trackers (accel.trackers entry points), data loading, big-model inference, the CLI
    "accel_tracking.trackers", "accel_data.prepare", "accel_data.loaders",
    "accel_data.dispatcher", "accel_data.samplers", "accel_data.skip", "accel_data.metrics",
    "accel_inference", "accel_launch", "accel_checkpoint.merge", "accel_checkpoint.fsdp_io",
    # the checkpoint machinery: loaded by the first save or load (accel._checkpoint_mixin),
    # and Accelerate's module path for its functions
    "accel._checkpointing", "accel.checkpointing", "accel_checkpoint.manager",
    "accel_checkpoint.manifest", "accel_checkpoint.hashing", "accel_checkpoint.weights",
    "xxhash",
    # third-party packages: optional extras, file formats and helpers used on demand
    "deepspeed", "torchao", "transformer_engine", "wandb", "tensorboard", "tensorboardX",
    "mlflow", "comet_ml", "aim", "clearml", "dvclive", "swanlab", "trackio", "safetensors",
    "packaging", "yaml", "rich", "transformers", "datasets", "peft", "bitsandbytes",
)

#: torch subsystems that a bare ``import torch`` does not load and accel must not either
TORCH_SUBSYSTEMS = (
    "torch._dynamo", "torch._inductor", "torch.distributed.fsdp", "torch.distributed.tensor",
    "torch.distributed.pipelining", "torch.distributed.checkpoint",
    "torch.distributed.algorithms.ddp_comm_hooks",
)

#: What building a single-process CPU ``Accelerator()`` and one training step without a
#: checkpoint must not import: the optional third-party backends (the strategy classes
#: themselves are loaded to be asked whether they accept the configuration, by design of
#: the registry).
NOT_AFTER_CONSTRUCTION = (
    "deepspeed", "torchao", "transformer_engine", "wandb", "tensorboard", "tensorboardX",
    "mlflow", "comet_ml", "aim", "clearml", "dvclive", "swanlab", "trackio", "safetensors",
    "accel_inference", "accel_launch", "accel_tracking.trackers", "torch._dynamo",
    "torch._inductor", "torch.distributed.fsdp", "torch.distributed.pipelining",
    # the checkpoint machinery (the project configuration is built; nothing is saved)
    "accel._checkpointing", "accel_checkpoint.manager", "accel_checkpoint.manifest",
)


def offenders(loaded: Iterable[str], forbidden: Iterable[str]) -> list[str]:
    """The forbidden names found in ``loaded``: a module counts for itself and for every
    module under it (``accel_parallel.fsdp`` catches ``accel_parallel.fsdp.plugin``)."""
    loaded = set(loaded)
    return sorted(name for name in forbidden
                  if name in loaded or any(m.startswith(name + ".") for m in loaded))


def _modules_after(code: str) -> set[str]:
    """``sys.modules`` of a fresh interpreter after ``code``, with no launcher variables
    (a run under ``accel launch`` must not change what a plain import loads)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACCEL_", "ACCELERATE_", "FSDP_", "PARALLELISM_CONFIG_"))}
    probe = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=120, cwd=REPO, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return set(json.loads(result.stdout.strip().splitlines()[-1]))


def test_the_checker_counts_submodules_and_nothing_else():
    loaded = ["accel_parallel.fsdp.plugin", "accel_parallel.strategy", "deepspeedx", "yaml"]
    assert offenders(loaded, ["accel_parallel.fsdp", "deepspeed", "yaml", "accel_launch"]) == [
        "accel_parallel.fsdp", "yaml"]


def test_from_accel_import_accelerator_loads_no_backend():
    pytest.importorskip("accel")
    torch_alone = _modules_after("import torch")
    loaded = _modules_after("import torch\nfrom accel import Accelerator")
    assert "accel.accelerator" in loaded  # the probe is real
    found = offenders(loaded, NOT_AT_IMPORT)
    assert found == [], (
        f"`from accel import Accelerator` imported {found}: import a backend's modules where "
        "it is selected or used (a module-level __getattr__ in the package, or an import "
        "inside the function), not at import time")
    torch_extra = offenders(loaded - torch_alone, TORCH_SUBSYSTEMS)
    assert torch_extra == [], f"`from accel import Accelerator` imported {torch_extra}"


_RAW_STEP = ("model = torch.nn.Linear(2, 2)\n"
             "optimizer = torch.optim.SGD(model.parameters(), 0.1)\n")


def test_a_cpu_training_step_imports_no_optional_backend():
    """Against the same step in plain torch, which loads some of torch's subsystems itself
    (the first ``optimizer.step()`` imports torch._dynamo)."""
    pytest.importorskip("accel")
    raw = _modules_after("import torch\n" + _RAW_STEP +
                         "model(torch.ones(1, 2)).sum().backward()\noptimizer.step()")
    loaded = _modules_after(
        "import torch\nfrom accel import Accelerator\n"
        "accelerator = Accelerator(cpu=True)\n"
        "assert type(accelerator.strategy).__name__ == 'SingleDeviceStrategy'\n" + _RAW_STEP +
        "model, optimizer = accelerator.prepare(model, optimizer)\n"
        "accelerator.backward(model(torch.ones(1, 2)).sum())\noptimizer.step()")
    found = offenders(loaded - raw, NOT_AFTER_CONSTRUCTION)
    assert found == [], (f"Accelerator(cpu=True) and one training step imported {found}, "
                         "which they do not use")
