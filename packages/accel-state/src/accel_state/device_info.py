"""Host and GPU facts Accelerate's ``utils.environment`` offers, without initialising CUDA
where it can be avoided (``nvidia-smi`` and NVML instead of ``torch.cuda``).

Every function here is safe to call on a CPU-only machine: GPU-specific answers come
from ``nvidia-smi`` / NVML / ``torch.cuda`` only when a GPU is present.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import platform
import re
import shutil
import subprocess

import torch

from accel_state import env
from accel_state.detect import _DISTRIBUTED_TYPES, select_device_type
from accel_state.enums import DistributedType
from accel_state.errors import ConfigurationError, MissingDependencyError

__all__ = ["check_cuda_fp8_capability", "check_cuda_p2p_ib_support", "check_os_kernel",
           "get_current_device_type", "get_driver_version", "get_gpu_info",
           "override_numa_affinity", "set_numa_affinity"]

logger = logging.getLogger(__name__)

#: consumer GPU families whose P2P / InfiniBand transfers hang with older drivers
_P2P_BROKEN_FAMILIES = ("RTX 40",)
_P2P_FIXED_DRIVER = (550, 40, 7)
_MIN_KERNEL = (5, 5, 0)


def get_current_device_type() -> tuple[str, DistributedType]:
    """``(device type, distributed type)`` of this machine, e.g. ``("cuda", MULTI_GPU)``
    or ``("cpu", MULTI_CPU)``; honours ``ACCEL_USE_CPU`` like the launcher does."""
    device_type = select_device_type()
    return device_type, _DISTRIBUTED_TYPES.get(device_type, DistributedType.NO)


def _nvidia_smi(query: str) -> list[str]:
    command = shutil.which("nvidia-smi")
    if command is None:
        raise FileNotFoundError(
            f"nvidia-smi is not on PATH: querying the GPUs ({query}) needs it. Install the "
            "NVIDIA driver (nvidia-smi comes with it) or run on a machine with NVIDIA GPUs.")
    output = subprocess.check_output([command, f"--query-gpu={query}", "--format=csv,noheader"],
                                     text=True, timeout=60)
    return [line.strip() for line in output.strip().splitlines() if line.strip()]


def get_gpu_info() -> tuple[list[str], int]:
    """``(names, count)`` of the NVIDIA GPUs, read with ``nvidia-smi`` (CUDA stays
    uninitialised, so forked workers can still use it)."""
    names = [line.split(",", 1)[-1].strip() for line in _nvidia_smi("count,name")]
    return names, len(names)


def get_driver_version() -> str:
    """The NVIDIA driver version (of the first GPU), read with ``nvidia-smi``."""
    return _nvidia_smi("driver_version")[0]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def check_cuda_p2p_ib_support() -> bool:
    """False when several consumer GPUs of a family with broken P2P / InfiniBand (RTX 40xx)
    run a driver older than 550.40.07 (then NCCL_P2P_DISABLE / NCCL_IB_DISABLE are needed);
    True otherwise, including without GPUs or nvidia-smi."""
    try:
        names, count = get_gpu_info()
        if count > 1 and any(f in name for name in names for f in _P2P_BROKEN_FAMILIES):
            return _version(get_driver_version()) >= _P2P_FIXED_DRIVER
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    return True


def check_cuda_fp8_capability() -> bool:
    """Whether the current CUDA GPU computes in fp8 (compute capability 8.9 or newer:
    Ada, Hopper, Blackwell). False without CUDA. Initialises CUDA."""
    if not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability() >= (8, 9)


def check_os_kernel() -> None:
    """Warn when Linux runs a kernel older than 5.5.0, which can make distributed
    processes hang; silent elsewhere."""
    info = platform.uname()
    if info.system != "Linux":
        return
    found = _version(info.release)
    if len(found) == 3 and found < _MIN_KERNEL:
        minimum = ".".join(map(str, _MIN_KERNEL))
        logger.warning(f"Detected Linux kernel {info.release}, below the recommended minimum "
                       f"{minimum}: processes may hang. Upgrade the kernel to {minimum} or newer.")


def _gpu_cpu_affinity(local_process_index: int) -> list[int]:
    try:
        import pynvml
    except ImportError:
        raise MissingDependencyError(
            "pynvml", feature="CPU affinity for CUDA GPUs (set_numa_affinity)") from None
    pynvml.nvmlInit()
    words = math.ceil((os.cpu_count() or 1) / 64)
    handle = pynvml.nvmlDeviceGetHandleByIndex(local_process_index)
    mask = pynvml.nvmlDeviceGetCpuAffinity(handle, words)
    return [64 * w + bit for w, word in enumerate(mask) for bit in range(64) if word >> bit & 1]


def override_numa_affinity(local_process_index: int, verbose: bool | None = None) -> None:
    """Pin this process to the CPU cores NVML lists as nearest to GPU ``local_process_index``
    (recomputed on every call). Without CUDA nothing changes."""
    if not isinstance(local_process_index, int) or local_process_index < 0:
        raise ConfigurationError(f"local_process_index={local_process_index!r} must be an "
                                 "integer >= 0 (this process's index on the machine).")
    if verbose is None:
        verbose = env.DEBUG_MODE.get_bool(False)
    if not torch.cuda.is_available():
        return
    cores = _gpu_cpu_affinity(local_process_index)
    if cores:
        os.sched_setaffinity(0, cores)
    if verbose:
        logger.info("Process %d pinned to %d CPU cores: %s", local_process_index,
                    len(os.sched_getaffinity(0)), sorted(os.sched_getaffinity(0)))


@functools.lru_cache
def set_numa_affinity(local_process_index: int, verbose: bool | None = None) -> None:
    """:func:`override_numa_affinity`, done once per process and index (cached)."""
    override_numa_affinity(local_process_index, verbose)
