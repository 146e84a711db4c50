"""Importing DeepSpeed (lazily) and the process group it runs in.

DeepSpeed is heavy to import (it pulls torch._dynamo and more): only the DeepSpeed
strategy's ``prepare`` and the plugin's ZeRO-3 context import it, never ``import accel``.
"""

from __future__ import annotations

import socket
from types import ModuleType
from typing import TYPE_CHECKING, Any

from accel_state import MissingDependencyError, env
from accel_state.imports import is_deepspeed_available

from accel_parallel.choosing import Unmet
from accel_parallel.slow_steps import Announcer, extension_dir, uncompiled_extensions

if TYPE_CHECKING:
    import torch

__all__ = ["announce_setup", "deepspeed_unmet", "ensure_process_group", "import_deepspeed",
           "require_deepspeed"]

_FEATURE = "DeepSpeed ZeRO (DeepSpeedPlugin / Accelerator(deepspeed_plugin=...))"


def deepspeed_unmet() -> list[Unmet]:
    """The DeepSpeed strategy's condition (its ``check``): the package is installed."""
    if is_deepspeed_available():
        return []
    return [Unmet("DeepSpeed ZeRO needs the deepspeed package, which is not installed",
                  'install it with: pip install "accel[deepspeed]"', package="deepspeed",
                  extra="deepspeed")]


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
    deepspeed = import_deepspeed()
    _forget_stale_groups(deepspeed.utils.groups)
    deepspeed.init_distributed(dist_backend=dist.get_backend(), dist_init_required=False)


def _forget_stale_groups(groups: ModuleType) -> None:
    """DeepSpeed keeps the groups it made from the world (its clone of the world, ZeRO++'s
    intra-node group, its device mesh) for the life of the process: after the process group
    was destroyed and made again (a notebook, a second Accelerator in one process), they
    name a dead group and the next engine fails in torch ("Group ... is not registered").
    Those no longer registered are dropped, so DeepSpeed makes them afresh."""
    import torch.distributed as dist

    def registered(group: Any) -> bool:
        try:
            dist.get_process_group_ranks(group)
        except (KeyError, ValueError, RuntimeError):
            return False
        return True

    for name in ("_WORLD_GROUP", "_ZERO_PARAM_INTRA_PARALLEL_GROUP"):
        group = getattr(groups, name, None)
        if group is not None and not registered(group):
            setattr(groups, name, None)
    mesh = getattr(groups, "mesh_device", None)
    if mesh is not None and not all(registered(g) for g in mesh.get_all_groups()):
        groups.mesh_device = None


#: what DeepSpeed's one-time C++ builds take on a small (2-core) machine, measured here
_TYPICAL = {"cpu_adam": "2-6 minutes", "cpu_adagrad": "2-6 minutes",
            "deepspeed_shm_comm": "1-2 minutes"}


def _ops_to_build(config: dict[str, Any], optimizer: Any, device: torch.device) -> list[str]:
    """The C++ ops DeepSpeed will JIT-compile for this engine: its CPU optimizer under
    optimizer offload, and on CPU its shared-memory all-reduce (unless turned off)."""
    ops = []
    zero = config.get("zero_optimization") or {}
    offload = (zero.get("offload_optimizer") or {}).get("device", "none") != "none"
    if offload and config.get("zero_force_ds_cpu_optimizer", True):
        kind = type(optimizer).__name__ if optimizer is not None else str(
            (config.get("optimizer") or {}).get("type", ""))
        if kind.lower() in ("adam", "adamw"):
            ops.append("cpu_adam")
        elif kind.lower() == "adagrad":
            ops.append("cpu_adagrad")
    # DeepSpeed's own table (ACCEL_DEEPSPEED_SHM_COMM=0 marks the op unavailable there)
    if device.type == "cpu" and import_deepspeed().ops.__compatible_ops__.get(
            "deepspeed_shm_comm", False):
        ops.append("deepspeed_shm_comm")
    return ops


def announce_setup(config: dict[str, Any], optimizer: Any, state: Any) -> Announcer:
    """Say so on each machine's main process when DeepSpeed is about to compile its ops
    (nothing is cached yet), with the elapsed time; otherwise only if setting up the engine
    takes unusually long (20 s)."""
    main = state.is_local_main_process
    pending = uncompiled_extensions(_ops_to_build(config, optimizer, state.device))
    if not pending:
        return Announcer("DeepSpeed is still setting up the engine (it may be compiling a C++ "
                         "op on first use).", what="DeepSpeed set-up", delay=20.0, main=main)
    times = "; ".join(f"{op}: usually {_TYPICAL.get(op, 'minutes')}" for op in pending)
    skip = (" ACCEL_DEEPSPEED_SHM_COMM=0 skips the shared-memory op (collectives then go "
            "through torch.distributed)." if "deepspeed_shm_comm" in pending else "")
    return Announcer(
        f"DeepSpeed is compiling its C++ op(s) {', '.join(pending)} with g++, once ({times} "
        f"on a small machine); they are cached in {extension_dir(pending[0]).parent} for later "
        f"runs.{skip}", what="DeepSpeed compile", main=main)
