"""Importing DeepSpeed (lazily) and the process group it runs in.

DeepSpeed is heavy to import (it pulls torch._dynamo and more): only the DeepSpeed
strategy's ``prepare`` and the plugin's ZeRO-3 context import it, never ``import accel``.
"""

from __future__ import annotations

import socket
from types import ModuleType
from typing import TYPE_CHECKING

from accel_state import MissingDependencyError, env
from accel_state.imports import is_deepspeed_available

if TYPE_CHECKING:
    import torch

__all__ = ["import_deepspeed", "require_deepspeed", "ensure_process_group"]

_FEATURE = "DeepSpeed ZeRO (DeepSpeedPlugin / Accelerator(deepspeed_plugin=...))"


def require_deepspeed() -> None:
    """Raise :class:`MissingDependencyError` naming ``pip install "accel[deepspeed]"`` when
    DeepSpeed is not installed (read from package metadata: nothing is imported)."""
    if not is_deepspeed_available():
        raise MissingDependencyError("deepspeed", extra="deepspeed", feature=_FEATURE)


def import_deepspeed() -> ModuleType:
    """``import deepspeed``, honouring ``ACCEL_DEEPSPEED_SHM_COMM=0``: DeepSpeed's
    shared-memory all-reduce op (compiled with g++ on first use on CPU) is then marked
    unavailable, and its collectives go through torch.distributed."""
    require_deepspeed()
    import deepspeed

    if env.DEEPSPEED_SHM_COMM.is_set() and not env.DEEPSPEED_SHM_COMM.get_bool(True):
        import deepspeed.ops

        # DeepSpeed's own table of buildable ops (probed once, kept in the module)
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    return deepspeed


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ensure_process_group(device: torch.device, local_rank: int = 0) -> None:
    """DeepSpeed needs a process group even in one process: make a one-process group on a
    free local port when none exists (several processes already have theirs), then hand
    it to DeepSpeed's communication layer. DeepSpeed also reads ``LOCAL_RANK``, which a
    script started without a launcher lacks: it is set to this process's."""
    import torch.distributed as dist

    if not env.LOCAL_RANK.is_set():
        env.LOCAL_RANK.set(local_rank)

    backend = "gloo" if device.type == "cpu" else "nccl" if device.type == "cuda" else None
    if not dist.is_initialized():
        dist.init_process_group(backend, rank=0, world_size=1,
                                init_method=f"tcp://127.0.0.1:{_free_port()}")
    import_deepspeed().init_distributed(dist_backend=dist.get_backend(), dist_init_required=False)
