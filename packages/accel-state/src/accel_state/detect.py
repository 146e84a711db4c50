"""Where are we running? The process's place in the job, its device and its backend.

Pure functions over the environment contract (``accel_state.env``) and torch's device
probes, so :class:`~accel_state.state.PartialState` stays a thin holder of their answers.
None of them initialises CUDA (fork safety).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from accel_state import env
from accel_state.enums import DistributedType
from accel_state.errors import ConfigurationError

__all__ = ["ProcessPlacement", "CPUInformation", "detect_placement", "get_cpu_distributed_information",
           "select_device_type", "backend_for_device", "distributed_type_for_device"]


@dataclass(frozen=True)
class ProcessPlacement:
    """This process's coordinates in the job and who told us (``source``)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    source: str = "single process"


@dataclass(frozen=True)
class CPUInformation:
    """Accelerate's name for the rank information of a multi-CPU job."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int


def _checked(placement: ProcessPlacement) -> ProcessPlacement:
    p = placement
    if p.world_size < 1 or not 0 <= p.rank < p.world_size:
        raise ConfigurationError(
            f"Inconsistent process placement from {p.source}: rank={p.rank}, "
            f"world_size={p.world_size}. The rank must be in [0, world_size); check the launcher's "
            "environment variables."
        )
    return p


def detect_placement() -> ProcessPlacement:
    """Read the rank and world size set by torchrun / ``accel launch``, SLURM or an MPI launcher.

    torchrun's variables win; SLURM and MPI variables are used only when they describe
    more than one task (a plain ``sbatch`` shell has ``SLURM_NTASKS=1``).
    """
    world = env.WORLD_SIZE.get_int()
    if world is not None:
        rank = env.RANK.get_int(0) or 0
        local_world = env.LOCAL_WORLD_SIZE.get_int(world) or world
        return _checked(ProcessPlacement(rank, world, env.LOCAL_RANK.get_int(0) or 0,
                                         local_world, "torchrun (RANK/WORLD_SIZE)"))
    slurm_world = env.SLURM_NTASKS.get_int()
    if slurm_world is not None and slurm_world > 1 and env.SLURM_PROCID.is_set():
        per_node = _leading_int(env.SLURM_NTASKS_PER_NODE.get()) or slurm_world
        return _checked(ProcessPlacement(env.SLURM_PROCID.get_int(0) or 0, slurm_world,
                                         env.SLURM_LOCALID.get_int(0) or 0, per_node,
                                         "SLURM (SLURM_PROCID/SLURM_NTASKS)"))
    mpi_world = env.MPI_SIZE.get_int()
    if mpi_world is not None and mpi_world > 1:
        local_world = env.MPI_LOCAL_SIZE.get_int(mpi_world) or mpi_world
        return _checked(ProcessPlacement(env.MPI_RANK.get_int(0) or 0, mpi_world,
                                         env.MPI_LOCAL_RANK.get_int(0) or 0, local_world,
                                         "MPI (PMI_*/OMPI_COMM_WORLD_*/MV2_COMM_WORLD_*)"))
    return ProcessPlacement()


def _leading_int(value: str | None) -> int | None:
    """SLURM writes ``SLURM_NTASKS_PER_NODE`` as e.g. ``4(x2)``: keep the leading number."""
    if not value:
        return None
    digits = value.split("(")[0].split(",")[0]
    return int(digits) if digits.isdigit() else None


def get_cpu_distributed_information() -> CPUInformation:
    p = detect_placement()
    return CPUInformation(p.rank, p.world_size, p.local_rank, p.local_world_size)


def select_device_type(cpu: bool = False) -> str:
    """``cpu`` when asked (argument or ``ACCEL_USE_CPU``) or when no accelerator is present."""
    if cpu or env.USE_CPU.get_bool(False):
        return "cpu"
    forced = env.TORCH_DEVICE.get()
    if forced:
        return torch.device(forced).type
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        return accelerator.current_accelerator().type
    if torch.cuda.is_available():
        return "cuda"
    return "cpu"


_BACKENDS = {"cpu": "gloo", "cuda": "nccl", "xpu": "xccl", "npu": "hccl", "hpu": "hccl",
             "mlu": "cncl", "musa": "mccl", "sdaa": "tccl", "mps": "gloo"}

_DISTRIBUTED_TYPES = {"cpu": DistributedType.MULTI_CPU, "cuda": DistributedType.MULTI_GPU,
                      "xpu": DistributedType.MULTI_XPU, "npu": DistributedType.MULTI_NPU,
                      "hpu": DistributedType.MULTI_HPU, "mlu": DistributedType.MULTI_MLU,
                      "musa": DistributedType.MULTI_MUSA, "sdaa": DistributedType.MULTI_SDAA,
                      "mps": DistributedType.MULTI_CPU}


def backend_for_device(device_type: str) -> str:
    """The process-group backend that fits ``device_type`` (gloo for CPU, nccl for CUDA, ...)."""
    try:
        return _BACKENDS[device_type]
    except KeyError:
        raise ConfigurationError(
            f"No default distributed backend for device type {device_type!r}; pass one with "
            "InitProcessGroupKwargs(backend=...)."
        ) from None


def distributed_type_for_device(device_type: str, world_size: int) -> DistributedType:
    if world_size <= 1:
        return DistributedType.NO
    return _DISTRIBUTED_TYPES.get(device_type, DistributedType.MULTI_GPU)


def cpu_count() -> int:
    """Cores this process may use (respects affinity masks, e.g. under SLURM or taskset)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1
